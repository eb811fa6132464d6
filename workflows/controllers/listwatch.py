"""List-then-watch of one collection of the management cluster, as client-go's reflector does.

`ListWatch.run` lists the collection (`listed` gets every item: a resync), then watches
from the list's resourceVersion (`changed` gets each event). A watch that ends on its
timeout is renewed from the last resourceVersion seen; one that answers 410 Gone (the
version was compacted away, e.g. after a long gap) lists again; a connection error backs
off with jitter and resumes from the last resourceVersion. An error never ends the loop,
and an event is handled before its resourceVersion is kept. Subclasses say what to list
and what to do; `workflows.controllers.resources` keeps hooksvc's custom resources in sync.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

from django.db import close_old_connections, connection

from workflows.kube import k8s, watches

logger = logging.getLogger(__name__)

BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 30.0


class ListWatch:
    """The loop; subclasses implement `collection`, `listed` and `changed`."""

    #: What the logs call the collection ("WorkflowTemplates").
    what = ""

    def __init__(self, *, stop: threading.Event, timeout_seconds: int = 60) -> None:
        self.stop = stop
        self.timeout_seconds = timeout_seconds
        #: "" until listed, and again after 410 Gone.
        self.resource_version = ""
        self.failures = 0
        #: A pass is one list or one watch (up to `timeout_seconds`) or one backoff.
        self.stale_after_seconds = 2 * (timeout_seconds + BACKOFF_CAP_SECONDS) + 60
        self.last_pass = time.monotonic()

    # --- what subclasses say ---------------------------------------------------------

    def collection(self) -> str:
        """The collection's path, e.g. /apis/hooks.hooksvc.io/v1alpha1/workflowtemplates."""
        raise NotImplementedError

    def fetch(self) -> dict[str, Any]:
        """The collection's List (a subclass may look for it at several versions)."""
        found: dict[str, Any] = k8s.request(
            k8s.management_api(), "GET", self.collection(), what=self.what
        )
        return found

    def listed(self, items: list[dict[str, Any]]) -> None:
        """Every item the collection holds now (first list, and after 410 Gone)."""
        raise NotImplementedError

    def changed(self, kind: str, obj: dict[str, Any]) -> None:
        """One watch event: ADDED, MODIFIED or DELETED."""
        raise NotImplementedError

    def renewed(self) -> None:
        """A watch ended on its timeout and is about to be renewed (a time to resync)."""

    def counted(self, outcome: str) -> None:
        """One pass ended: `ok`, `gone` (410, listing again) or `failed` (backing off)."""

    # --- the loop -------------------------------------------------------------------

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
            self.counted("ok")
        except k8s.Gone:
            logger.info(
                "watch expired (410 Gone); listing again",
                extra={"action": "watch_gone", "what": self.what},
            )
            self.counted("gone")
            self.resource_version = ""
        except Exception as exc:
            self.counted("failed")
            self.failures += 1
            cap = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (self.failures - 1))
            # Spreading retries, not a secret.
            delay = random.uniform(cap / 2, cap)  # noqa: S311  # nosec B311
            logger.warning(
                "watching failed; resuming after a pause",
                extra={
                    "action": "watch_failed",
                    "what": self.what,
                    "error": type(exc).__name__,
                    "resource_version": self.resource_version,
                    "delay": round(delay, 1),
                },
            )
            self.stop.wait(delay)
        finally:
            self.last_pass = time.monotonic()

    def _list(self) -> None:
        found = self.fetch()
        close_old_connections()
        self.listed(list(found.get("items") or []))
        self.resource_version = str((found.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self) -> None:
        events = watches.watch(
            k8s.management_api(),
            self.collection(),
            resource_version=self.resource_version,
            timeout_seconds=self.timeout_seconds,
            what=f"watch of {self.what}",
        )
        for event in events:
            obj = event.get("object") or {}
            self.last_pass = time.monotonic()
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                # A long-lived process: drop a database connection that went stale or broke.
                close_old_connections()
                self.changed(str(event["type"]), obj)
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = str(version)
            if self.stop.is_set():
                return
        close_old_connections()
        self.renewed()
