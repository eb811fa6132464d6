"""The Cluster watcher: add-on removal for Clusters CAPI calls no hook for, and ClusterDeleted.

CAPI calls lifecycle hooks only for Clusters with a managed topology (ClusterClass; see
kubernetes-sigs/cluster-api#11491). `Watcher` lists and watches the management cluster's
Clusters (`workflows.controllers.listwatch`: lists again when the API server refuses a version,
resumes from the last resourceVersion when it does not answer) and

- when a Cluster without a topology gets a deletionTimestamp, ensures the removal runs the
  BeforeClusterDelete hook would start (`hookpath.runs.runs_ensure` with the matching generated
  `addon-remove-*` templates), holding nothing: such a Cluster has no hook to hold;
- when a Cluster is gone (its DELETED event, or missing from a list while hooksvc has a
  record of it), starts the runs of the templates that name hooksvc's own moment
  `ClusterDeleted`, which CAPI has no hook for: the Cluster object disappears only after
  everything it owned is deleted. Each Cluster seen is recorded (`KnownCluster`, written
  only when what is recorded of it changes); its record goes in the transaction that
  ensures its ClusterDeleted runs, so a watcher restarted in between, or a list that
  missed the DELETED event, still starts them once.

Runs are unique per (template, cluster, moment), so handling a Cluster again (a re-list, a
restart) changes nothing. With a port, `serve` answers /healthz and /metrics. /healthz is
503, saying why, when the process does not lead as it should (`leader.Manager.problem`) or a
loop is stuck (no pass finished for `stale_after_seconds`, e.g. on a hung connection) or
makes no progress while the API server refuses its lists and watches; it does not fail
while the API server is merely unreachable: a restart would not help (alert on the metrics).
"""

from __future__ import annotations

import http.server
import logging
import threading
import time
from typing import Any, Protocol

from django.db import transaction
from prometheus_client import CollectorRegistry, generate_latest

from hooksvc import build, metrics
from hooksvc.contract import catalog, wire
from workflows.controllers import listwatch
from workflows.definitions import addons, typed
from workflows.engine import messages
from workflows.hookpath import runs as hook_runs
from workflows.hookpath import selection
from workflows.kube import k8s, watches
from workflows.models import KnownCluster, Run, WorkflowTemplate

logger = logging.getLogger(__name__)

HOOK = catalog.HOOKS["BeforeClusterDelete"]


def _parse(obj: dict[str, Any]) -> wire.Cluster | None:
    try:
        return wire.parse_cluster(obj)
    except wire.BadRequest:
        logger.warning("not a Cluster we can read; ignored", extra={"action": "watch_bad_cluster"})
        return None


def _where(cluster: wire.Cluster) -> str:
    return f"{cluster.namespace}/{cluster.name}"


def _templates(hook: catalog.Hook, call: wire.HookCall, **filters: Any) -> list[WorkflowTemplate]:
    """The templates of `hook` that `call` matches, [] if they wait for each other in a cycle."""
    templates = [
        t
        for t in WorkflowTemplate.objects.filter(hook=hook.name, **filters)
        if selection.matches(typed.of(t.spec), call)
    ]
    cycle = hook_runs.wait_cycle(templates)
    if cycle:
        logger.error(
            messages.wait_cycle(cycle),
            extra={"action": "watch_wait_cycle", "cluster": _where(call.cluster)},
        )
        return []
    return templates


def removal_ensure(obj: dict[str, Any]) -> list[int]:
    """The removal runs of a deleted Cluster without a topology, ensured; their ids."""
    cluster = _parse(obj)
    return [] if cluster is None else _removal_ensure(cluster)


def _removal_ensure(cluster: wire.Cluster) -> list[int]:
    if not cluster.deletion_timestamp or cluster.has_topology:
        return []  # not deleted, or CAPI calls the hook for it
    call = wire.HookCall(hook=HOOK, settings={}, cluster=cluster)
    templates = _templates(HOOK, call, managed_by__startswith=addons.MANAGED_PREFIX)
    if not templates:
        return []
    with transaction.atomic():
        # Counted once per Cluster: a deletion brings many MODIFIED events and re-lists.
        started_before = Run.objects.filter(
            hook=HOOK.name,
            cluster_key=cluster.key,
            template_name__in=[t.name for t in templates],
        ).exists()
        runs = hook_runs.runs_ensure(templates=templates, call=call)
    if not started_before:
        metrics.WATCHER_REMOVALS.inc()
    logger.info(
        "removal ensured for a deleted Cluster without a topology",
        extra={"action": "watch_removal", "cluster": _where(cluster), "runs": [r.pk for r in runs]},
    )
    return [r.pk for r in runs]


def deleted_ensure(cluster: wire.Cluster) -> list[int]:
    """The ClusterDeleted runs of a Cluster that is gone, ensured; its record dropped."""
    call = wire.HookCall(hook=catalog.CLUSTER_DELETED, settings={}, cluster=cluster)
    with transaction.atomic():
        templates = _templates(catalog.CLUSTER_DELETED, call)
        runs = hook_runs.runs_ensure(templates=templates, call=call) if templates else []
        forgotten, _ = KnownCluster.objects.filter(key=cluster.key).delete()
    metrics.WATCHER_DELETED.inc()
    logger.info(
        "a Cluster is gone: its ClusterDeleted runs ensured",
        extra={
            "action": "watch_cluster_deleted",
            "cluster": _where(cluster),
            "runs": [r.pk for r in runs],
            "recorded": bool(forgotten),
        },
    )
    return [r.pk for r in runs]


def _record(cluster: wire.Cluster) -> dict[str, Any]:
    """What is kept of a Cluster: a Cluster object `wire.parse_cluster` reads back alike."""
    metadata: dict[str, Any] = {
        "name": cluster.name,
        "namespace": cluster.namespace,
        "uid": cluster.uid,
        "labels": cluster.labels,
        "annotations": cluster.annotations,
    }
    if cluster.deletion_timestamp:
        metadata["deletionTimestamp"] = cluster.deletion_timestamp
    topology: dict[str, Any] = {"version": cluster.topology_version}
    if cluster.class_name:
        topology["classRef"] = {"name": cluster.class_name, "namespace": cluster.class_namespace}
    return {"metadata": metadata, "spec": {"topology": topology}}


class Watcher(listwatch.ListWatch):
    """The list-then-watch loop over Clusters; `run` until `stop` is set."""

    what = "Clusters"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: The Clusters collection at the newest version the server serves (found by listing).
        self.path = ""
        #: What KnownCluster holds, by key, as last read or written.
        self.known: dict[str, dict[str, Any]] = {}

    def collection(self) -> str:
        return self.path

    def fetch(self) -> dict[str, Any]:
        self.path, found = watches.list_clusters(k8s.management_api())
        return found

    def counted(self, outcome: str) -> None:
        metrics.WATCHER_PASSES.labels(outcome=outcome).inc()
        if outcome == "ok":
            metrics.WATCHER_LAST_OK.set(time.time())

    def listed(self, items: list[dict[str, Any]]) -> None:
        self.known = {k.key: k.cluster for k in KnownCluster.objects.all()}
        present = {cluster.key for item in items if (cluster := self._seen(item)) is not None}
        # Recorded but no longer there: deleted while this watcher was away, or in between.
        for key in sorted(set(self.known) - present):
            gone = _parse(self.known.pop(key))
            if gone is not None:
                deleted_ensure(gone)

    def changed(self, kind: str, obj: dict[str, Any]) -> None:
        if kind != "DELETED":
            self._seen(obj)
            return
        cluster = _parse(obj)
        if cluster is not None:
            deleted_ensure(cluster)
            self.known.pop(cluster.key, None)

    def _seen(self, obj: dict[str, Any]) -> wire.Cluster | None:
        cluster = _parse(obj)
        if cluster is None:
            return None
        _removal_ensure(cluster)
        record = _record(cluster)
        if self.known.get(cluster.key) != record:
            KnownCluster.objects.update_or_create(
                key=cluster.key,
                defaults={"namespace": cluster.namespace, "name": cluster.name, "cluster": record},
            )
            self.known[cluster.key] = record
        return cluster


#: The watcher's own metrics: it is a process of its own, sharing no files with the web.
_REGISTRY = CollectorRegistry(auto_describe=True)
for _metric in (
    metrics.WATCHER_PASSES,
    metrics.WATCHER_REMOVALS,
    metrics.WATCHER_LAST_OK,
    metrics.WATCHER_DELETED,
    metrics.WATCHER_LEADER,
    metrics.RESOURCE_PASSES,
    metrics.RESOURCE_WRITES,
):
    _REGISTRY.register(_metric)
_REGISTRY.register(build.BuildInfo())


class Healthy(Protocol):
    """A loop (or the manager of loops) that says what keeps it from working, if anything."""

    def problem(self) -> str: ...


def serve(loop: Healthy, port: int, host: str = "") -> http.server.ThreadingHTTPServer:
    """Answer /healthz and /metrics for `loop` on `port` (plain HTTP) from a daemon thread."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                problem = loop.problem()
                status, body = (503, f"{problem}\n".encode()) if problem else (200, b"ok\n")
                content_type = "text/plain"
            elif self.path == "/metrics":
                status, body = 200, generate_latest(_REGISTRY)
                content_type = "text/plain; version=0.0.4"
            else:
                status, body, content_type = 404, b"not found\n", "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # probes every few seconds would drown the watcher's own lines

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="watcher-http", daemon=True).start()
    return server
