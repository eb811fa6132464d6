"""List-then-watch of one collection of the management cluster, as client-go's reflector does.

`ListWatch.run` lists the collection (`listed` gets every item: a resync), then watches
from the list's resourceVersion (`changed` gets each event). How a pass ends decides the
next, after client-go's `tools/cache/reflector.go` (kubernetes/client-go v0.36,
`Reflector.watch` and `RunWithContext`):

- a watch that ends on its timeout is renewed from the last resourceVersion seen;
- 410 Gone (the version was compacted away) lists again at once (`isExpiredError`);
- no answer at all (refused, timed out, a broken stream) or 429 backs off and watches again
  from the same resourceVersion (`isWatchErrorRetriable`, `IsTooManyRequests`): the API
  server did not say the version is bad;
- any other error the API server answers (an HTTP status, an ERROR event in the stream:
  a 500, "too large resource version" after an etcd restore) backs off and lists again,
  never resuming forever from a version the server refuses; so does a watch that ends
  within a second with no event (`VeryShortWatchError`);
- a failure in our own handling (the database, say) backs off and resumes from the last
  resourceVersion kept, which comes again.

An event is handled before its resourceVersion is kept, and none is handled once `stop` is
set. `problem()` says when the loop is stuck (no pass finished for `stale_after_seconds`) or
makes no progress while the API server answers it errors (no list or watch succeeded for
`progress_deadline_seconds`); an API server that does not answer at all is not a problem a
restart solves. Subclasses say what to list and what to do; `workflows.controllers.resources`
keeps hooksvc's custom resources in sync, `workflows.controllers.watcher` watches Clusters.
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
#: A loop whose lists and watches the API server keeps refusing this long is unhealthy.
PROGRESS_DEADLINE_SECONDS = 600.0
#: A watch that ends sooner without an event is a failure, not a renewal (client-go's
#: reflector: `VeryShortWatchError`), so a server that closes watches at once is not hammered.
SHORTEST_WATCH_SECONDS = 1.0


class ListWatch:
    """The loop; subclasses implement `collection`, `listed` and `changed`."""

    #: What the logs call the collection ("WorkflowTemplates").
    what = ""

    def __init__(self, *, stop: threading.Event, timeout_seconds: int = 60) -> None:
        self.stop = stop
        self.timeout_seconds = timeout_seconds
        #: "" until listed, and again whenever the API server refused to go on from it.
        self.resource_version = ""
        self.failures = 0
        #: A pass is one list or one watch (up to `timeout_seconds`) or one backoff.
        self.stale_after_seconds = 2 * (timeout_seconds + BACKOFF_CAP_SECONDS) + 60
        self.progress_deadline_seconds = PROGRESS_DEADLINE_SECONDS
        self.last_pass = self.last_progress = time.monotonic()
        #: Whether the latest failed pass was an answer of the API server (not silence).
        self.refused = False

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
        """Every item the collection holds now (first list, and every list again)."""
        raise NotImplementedError

    def changed(self, kind: str, obj: dict[str, Any]) -> None:
        """One watch event: ADDED, MODIFIED or DELETED."""
        raise NotImplementedError

    def renewed(self) -> None:
        """A watch ended on its timeout and is about to be renewed (a time to resync)."""

    def counted(self, outcome: str) -> None:
        """One pass ended: `ok`, `gone` (410, listing again) or `failed` (backing off)."""

    # --- the loop -------------------------------------------------------------------

    def problem(self) -> str:
        """Why the loop is unhealthy, or "" while it turns and makes progress."""
        now = time.monotonic()
        if now - self.last_pass >= self.stale_after_seconds:
            return f"the {self.what} loop is stuck"
        if self.refused and now - self.last_progress >= self.progress_deadline_seconds:
            return (
                f"the {self.what} loop makes no progress: the API server has refused its lists"
                f" and watches for over {self.progress_deadline_seconds:.0f} s"
            )
        return ""

    def healthy(self) -> bool:
        return not self.problem()

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
        except k8s.Gone:
            logger.info(
                "watch expired (410 Gone); listing again",
                extra={"action": "watch_gone", "what": self.what},
            )
            self.counted("gone")
            self.resource_version = ""
        except Exception as exc:
            self._failed(exc)
        else:
            self.failures = 0
            self.refused = False
            self.last_progress = time.monotonic()
            self.counted("ok")
        finally:
            self.last_pass = time.monotonic()

    def _failed(self, exc: Exception) -> None:
        status = exc.status if isinstance(exc, k8s.K8sError) else None
        # The API server answered (an error, or a watch it closed at once); unless it asked
        # for patience (429), it refused to go on from this version: list again.
        answered = status is not None or isinstance(exc, VeryShortWatch)
        relist = answered and status != 429
        self.counted("failed")
        self.failures += 1
        self.refused = answered
        cap = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (self.failures - 1))
        # Spreading retries, not a secret.
        delay = random.uniform(cap / 2, cap)  # noqa: S311  # nosec B311
        logger.warning(
            "watching failed; listing again after a pause"
            if relist
            else "watching failed; resuming after a pause",
            extra={
                "action": "watch_failed",
                "what": self.what,
                "error": type(exc).__name__,
                "status": status,
                "causes": list(exc.causes) if isinstance(exc, k8s.K8sError) else [],
                "resource_version": self.resource_version,
                "delay": round(delay, 1),
            },
        )
        if relist:
            self.resource_version = ""
        self.stop.wait(delay)

    def _list(self) -> None:
        found = self.fetch()
        close_old_connections()
        self.listed(list(found.get("items") or []))
        self.resource_version = str((found.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self) -> None:
        started, events = time.monotonic(), 0
        stream = watches.watch(
            k8s.management_api(),
            self.collection(),
            resource_version=self.resource_version,
            timeout_seconds=self.timeout_seconds,
            what=f"watch of {self.what}",
        )
        for event in stream:
            if self.stop.is_set():
                return  # not ours to handle any more: the next leader lists again
            events += 1
            obj = event.get("object") or {}
            self.last_pass = self.last_progress = time.monotonic()
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                # A long-lived process: drop a database connection that went stale or broke.
                close_old_connections()
                self.changed(str(event["type"]), obj)
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = str(version)
        shortest = min(SHORTEST_WATCH_SECONDS, self.timeout_seconds / 2)
        if not events and time.monotonic() - started < shortest:
            raise VeryShortWatch(f"watch of {self.what}: ended at once without an event")
        close_old_connections()
        self.renewed()


class VeryShortWatch(Exception):
    """The watch ended within a second without an event: a failure, not a renewal."""
