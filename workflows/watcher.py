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
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

from django.db import close_old_connections, connection, transaction

from hooksvc import catalog, wire
from workflows import addons, engine, k8s, selection
from workflows.models import WorkflowTemplate

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
        runs = engine.runs_ensure(templates=templates, call=call)
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
        except k8s.Gone:
            logger.info("watch expired (410 Gone); listing again", extra={"action": "watch_gone"})
            self.resource_version = ""
        except Exception as exc:
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
