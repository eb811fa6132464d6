"""Starts add-on removal for deleted Clusters that CAPI calls no BeforeClusterDelete for.

CAPI calls lifecycle hooks only for Clusters with a managed topology (ClusterClass; see
kubernetes-sigs/cluster-api#11491). `manage.py watch_clusters` runs `Watcher`, which
watches Clusters in the management cluster through `workflows.k8s` and, when one without
a topology gets a deletionTimestamp, ensures the same removal runs the hook would start
(`engine.runs_ensure` with the matching generated `addon-remove-*` templates). Nothing is
held: such a Cluster has no hook to hold. Runs are unique per (template, cluster, moment),
so handling a Cluster again (a re-list, a restart) changes nothing.

The watch lists to get a resourceVersion, then watches from it; it re-lists on 410 Gone
and, after a connection error, backs off and resumes from the last resourceVersion seen.
An error never ends the loop, and an event is done before its resourceVersion is kept.

With a port, `serve` answers /healthz (the loop is still turning: 503 once it has not
finished a pass for `stale_after_seconds`, e.g. stuck on a hung connection) and /metrics
(passes by outcome, removals, the last successful pass). /healthz does not fail while the
API server is merely unreachable: a restart would not help; alert on the metrics instead.
"""

from __future__ import annotations

import http.server
import logging
import random
import threading
import time
from typing import Any

from django.db import close_old_connections, connection, transaction
from prometheus_client import CollectorRegistry, generate_latest

from hooksvc import catalog, metrics, wire
from workflows import addons, engine, k8s, selection
from workflows.models import Run, WorkflowTemplate

logger = logging.getLogger(__name__)

HOOK = catalog.HOOKS["BeforeClusterDelete"]
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 30.0


def removal_ensure(obj: dict[str, Any]) -> list[int]:
    """The removal runs of a deleted Cluster without a topology, ensured; their ids."""
    try:
        cluster = wire.parse_cluster(obj)
    except wire.BadRequest:
        logger.warning("not a Cluster we can read; ignored", extra={"action": "watch_bad_cluster"})
        return []
    if not cluster.deletion_timestamp or cluster.has_topology:
        return []  # not deleted, or CAPI calls the hook for it
    call = wire.HookCall(hook=HOOK, settings={}, cluster=cluster)
    templates = [
        t
        for t in WorkflowTemplate.objects.filter(
            hook=HOOK.name, managed_by__startswith=addons.MANAGED_PREFIX
        )
        if selection.matches(t.spec, call)
    ]
    if not templates:
        return []
    cycle = engine.wait_cycle(templates)
    if cycle:
        logger.error(
            engine.cycle_message(cycle),
            extra={"action": "watch_wait_cycle", "cluster": f"{cluster.namespace}/{cluster.name}"},
        )
        return []
    with transaction.atomic():
        # Counted once per Cluster: a deletion brings many MODIFIED events and re-lists.
        started_before = Run.objects.filter(
            hook=HOOK.name,
            cluster_key=cluster.key,
            template_name__in=[t.name for t in templates],
        ).exists()
        runs = engine.runs_ensure(templates=templates, call=call)
    if not started_before:
        metrics.WATCHER_REMOVALS.inc()
    logger.info(
        "removal ensured for a deleted Cluster without a topology",
        extra={
            "action": "watch_removal",
            "cluster": f"{cluster.namespace}/{cluster.name}",
            "runs": [r.pk for r in runs],
        },
    )
    return [r.pk for r in runs]


class Watcher:
    """The list-then-watch loop over Clusters; `run` until `stop` is set."""

    def __init__(self, *, stop: threading.Event, timeout_seconds: int = 60) -> None:
        self.stop = stop
        self.timeout_seconds = timeout_seconds
        #: "" until listed, and again after 410 Gone.
        self.resource_version = ""
        self.path = ""
        self.failures = 0
        #: A pass is one list or one watch (up to `timeout_seconds`) or one backoff.
        self.stale_after_seconds = 2 * (timeout_seconds + BACKOFF_CAP_SECONDS) + 60
        self.last_pass = time.monotonic()

    def healthy(self) -> bool:
        return time.monotonic() - self.last_pass < self.stale_after_seconds

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.once()
        finally:
            connection.close()

    def once(self) -> None:
        """One list or one watch; errors are logged and backed off, never raised."""
        try:
            if not self.resource_version:
                self._list()
            else:
                self._watch()
            self.failures = 0
            metrics.WATCHER_PASSES.labels(outcome="ok").inc()
            metrics.WATCHER_LAST_OK.set(time.time())
        except k8s.Gone:
            logger.info("watch expired (410 Gone); listing again", extra={"action": "watch_gone"})
            metrics.WATCHER_PASSES.labels(outcome="gone").inc()
            self.resource_version = ""
        except Exception as exc:
            metrics.WATCHER_PASSES.labels(outcome="failed").inc()
            self.failures += 1
            cap = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (self.failures - 1))
            # Spreading retries, not a secret.
            delay = random.uniform(cap / 2, cap)  # noqa: S311  # nosec B311
            logger.warning(
                "watching Clusters failed; resuming after a pause",
                extra={
                    "action": "watch_failed",
                    "error": type(exc).__name__,
                    "resource_version": self.resource_version,
                    "delay": round(delay, 1),
                },
            )
            self.stop.wait(delay)
        finally:
            self.last_pass = time.monotonic()

    def _list(self) -> None:
        self.path, found = k8s.list_clusters(k8s.management_api())
        for item in found.get("items") or []:
            self._handle(item)
        self.resource_version = str((found.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self) -> None:
        events = k8s.watch(
            k8s.management_api(),
            self.path,
            resource_version=self.resource_version,
            timeout_seconds=self.timeout_seconds,
            what="watch of Clusters",
        )
        for event in events:
            obj = event.get("object") or {}
            self.last_pass = time.monotonic()
            if event.get("type") in ("ADDED", "MODIFIED"):
                self._handle(obj)
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = str(version)
            if self.stop.is_set():
                return

    def _handle(self, obj: dict[str, Any]) -> None:
        # A long-lived process: drop a database connection that went stale or broke.
        close_old_connections()
        removal_ensure(obj)


#: The watcher's own metrics: it is a process of its own, sharing no files with the web.
_REGISTRY = CollectorRegistry(auto_describe=True)
for _metric in (metrics.WATCHER_PASSES, metrics.WATCHER_REMOVALS, metrics.WATCHER_LAST_OK):
    _REGISTRY.register(_metric)


def serve(loop: Watcher, port: int, host: str = "") -> http.server.ThreadingHTTPServer:
    """Answer /healthz and /metrics for `loop` on `port` (plain HTTP) from a daemon thread."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                ok = loop.healthy()
                status, body = (200, b"ok\n") if ok else (503, b"the watch loop is stuck\n")
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
