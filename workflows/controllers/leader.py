"""One leader among the watcher's replicas, and the loops it runs while it leads.

`manage.py watch_clusters` runs a `Manager`: it campaigns for the lead, and while it holds
it runs the Cluster watcher (`workflows.controllers.watcher`) and one resource controller
per kind (`workflows.controllers.resources`), each in its own thread; losing the lead (or
being asked to stop) stops them, and a replica that does not lead stands by.

The lead is the Lease `hooksvc-watcher` (`workflows.controllers.lease`), campaigned for
and renewed as client-go's leaderelection does (`LeaderElector.acquire` and `renew`):
a candidate tries every retry period (with jitter); the leader renews every retry period
and, when no renewal succeeds within the renew deadline, stops its loops (before the
lease's duration lets a standby take over); a leader that stops cleanly releases the Lease,
so a standby leads within a retry period. Why a Lease rather than the PostgreSQL
session-level advisory lock it replaces: hooksvc supports a transaction-pooling
PgBouncer, which hands a session's server connection to other clients between
transactions, so a session lock is neither held by the leader nor freed when it dies; the
Lease lives in the API server the loops watch anyway (a leader cut off from it has nothing
to do), needs no database session, and shows who leads (`kubectl get lease`). It costs a
leader that dies without releasing: its lease runs out first (15 s by default).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings

from hooksvc import metrics
from workflows.controllers import lease

logger = logging.getLogger(__name__)

LEASE_NAME = "hooksvc-watcher"
#: Where a Pod's ServiceAccount namespace is mounted (the Lease's default namespace there).
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
#: A leader whose lease was not renewed for its duration and this long is unhealthy
#: (client-go leaderelection HealthzAdaptor: `Check(maxTolerableExpiredLease)`).
TOLERABLE_EXPIRED_LEASE_SECONDS = 20.0
#: How long a stopping leader tries to release the Lease (within hooksvc.pid1.LEAVE_SECONDS).
RELEASE_SECONDS = 1.5


class Loop(Protocol):
    """What the manager runs: a list-watch loop (`run` until its stop event is set)."""

    def run(self) -> None: ...

    def problem(self) -> str: ...


def lease_namespace() -> str:
    """HOOKSVC_WATCHER_LEASE_NAMESPACE, else the Pod's namespace, else `default`."""
    if settings.WATCHER_LEASE_NAMESPACE:
        return str(settings.WATCHER_LEASE_NAMESPACE)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and SERVICE_ACCOUNT_NAMESPACE.exists():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return "default"


def identity() -> str:
    """This replica: the host (a Pod's name) and a unique suffix, as client-go's users do."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


class Manager:
    """Campaigns for the lead; while leading, runs its loops; stands by otherwise."""

    def __init__(
        self,
        *,
        stop: threading.Event,
        loops: Any,
        timing: lease.Timing | None = None,
        namespace: str | None = None,
        name: str = LEASE_NAME,
        holder: str | None = None,
    ) -> None:
        self.stop = stop
        #: Called at each new term with the term's stop event: the loops to run.
        self.make_loops = loops
        self.timing = timing or lease.Timing()
        self.lease = lease.Lease(
            namespace=namespace or lease_namespace(),
            name=name,
            identity=holder or identity(),
            timing=self.timing,
        )
        self.loops: list[Loop] = []
        self.leading = False
        self.terms = 0

    def problem(self) -> str:
        """A standby is healthy; a leader is while it renews and every loop still turns."""
        if not self.leading:
            return ""
        late = time.monotonic() - self.lease.observed_at
        if late > self.timing.lease_duration + TOLERABLE_EXPIRED_LEASE_SECONDS:
            return f"the lead was not renewed for {late:.0f} s"
        return next((p for loop in self.loops if (p := loop.problem())), "")

    def healthy(self) -> bool:
        return not self.problem()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                if self._acquire():
                    self._lead()
        finally:
            metrics.WATCHER_LEADER.set(0)

    def _try(self, timeout: float) -> bool:
        try:
            return self.lease.try_acquire_or_renew(timeout=timeout)
        except Exception:
            logger.exception("campaigning for the lead failed", extra={"action": "leader_error"})
            return False

    def _acquire(self) -> bool:
        """Try every retry period (jittered) until the lease is ours; False once stopped."""
        while not self.stop.is_set():
            if self._try(self.timing.renew_deadline):
                return True
            # Spreading candidates' tries, not a secret.
            jitter = random.uniform(1.0, lease.JITTER_FACTOR)  # noqa: S311  # nosec B311
            self.stop.wait(self.timing.retry_period * jitter)
        return False

    def _renewed(self) -> bool:
        """Renew within the renew deadline, trying every retry period (client-go `renew`)."""
        deadline = time.monotonic() + self.timing.renew_deadline
        while not self.stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._try(remaining):
                return True
            self.stop.wait(min(self.timing.retry_period, max(0.0, deadline - time.monotonic())))
        return True  # asked to stop, not lost

    def _lead(self) -> None:
        self.terms += 1
        term = threading.Event()
        self.loops = list(self.make_loops(term))
        threads = [
            threading.Thread(target=loop.run, name=f"watch-{i}", daemon=True)
            for i, loop in enumerate(self.loops)
        ]
        self.leading = True
        logger.info(
            "leading: watches started",
            extra={
                "action": "leader_elected",
                "lease": self.lease.path,
                "holder": self.lease.identity,
            },
        )
        metrics.WATCHER_LEADER.set(1)
        for thread in threads:
            thread.start()
        try:
            while not self.stop.wait(self.timing.retry_period):
                if not self._renewed():
                    logger.warning(
                        "lost the lead (the Lease was not renewed in time): watches stop",
                        extra={"action": "leader_lost", "lease": self.lease.path},
                    )
                    break
        finally:
            term.set()
            self.leading = False
            metrics.WATCHER_LEADER.set(0)
            # Loops end at their next event or pass, handling nothing more; when the process
            # stops, not for long: it has hooksvc.pid1.LEAVE_SECONDS in all, and the
            # threads are daemons (what they cut short, the next leader redoes).
            deadline = time.monotonic() + (0.5 if self.stop.is_set() else 30)
            for thread in threads:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
            if self.stop.is_set():
                self._release()
            self.loops = []

    def _release(self) -> None:
        try:
            released = self.lease.release(timeout=RELEASE_SECONDS)
        except Exception:
            released = False
        if not released:
            logger.warning(
                "could not release the Lease: a standby leads once it runs out",
                extra={"action": "leader_release_failed", "lease": self.lease.path},
            )
