"""One leader among the watcher's replicas, and the loops it runs while it leads.

`manage.py watch_clusters` runs a `Manager`: it campaigns for the lead, and while it holds
it runs the Cluster watcher (`workflows.controllers.watcher`) and one resource controller
per kind (`workflows.controllers.resources`), each in its own thread; losing the lead (or
being asked to stop) stops them, and a replica that does not lead stands by.

The lead is a PostgreSQL session-level advisory lock (`pg_try_advisory_lock`) held on a
connection of its own, rather than a coordination.k8s.io Lease as client-go's
leaderelection takes one: everything the loops write that must happen once (runs, the
templates and profiles) is in PostgreSQL, the lock lives beside it, needs no RBAC and no
clock, and goes with its session: a leader that exits or dies frees it at once (a Lease
waits out its duration). Its session sets TCP keepalives (idle 10 s, then 3 probes 5 s
apart) so that PostgreSQL also ends the session of a leader whose machine vanished within
about 25 s, and the leader checks its connection every `CHECK_SECONDS`, with
`tcp_user_timeout` bounding a check on a dead network, and stops its loops when the
check fails. Two leaders for a moment would not break anything (every write is
idempotent: a run per moment is a unique row, the upserts change nothing twice, status
writes are computed from the same rows): the lock keeps replicas from doubling the work
and the API server's load.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any, Protocol

import psycopg
from django.db import connection

from hooksvc import metrics

logger = logging.getLogger(__name__)

#: The advisory lock's key, hashed by PostgreSQL (hashtext) to the lock's number.
LOCK = "hooksvc-watcher-leader"
CHECK_SECONDS = 5.0
CAMPAIGN_SECONDS = 5.0
#: libpq: keepalives of the lock's connection, and how long unacknowledged data may wait.
_CLIENT_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30000,
}
#: The same on the server's side of the session (settable by any user, per session).
_SERVER_KEEPALIVES = (
    "SET tcp_keepalives_idle = 10",
    "SET tcp_keepalives_interval = 5",
    "SET tcp_keepalives_count = 3",
)


class Loop(Protocol):
    """What the manager runs: a list-watch loop (`run` until its stop event is set)."""

    def run(self) -> None: ...

    def healthy(self) -> bool: ...


class Leader:
    """The advisory lock on a connection of its own (not Django's: it closes idle ones)."""

    def __init__(self) -> None:
        self._conn: psycopg.Connection[Any] | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None

    def acquire(self) -> bool:
        """Take the lead if free; False (and no connection kept) if another replica has it."""
        params = {**connection.get_connection_params(), **_CLIENT_KEEPALIVES}
        conn = psycopg.connect(**params, autocommit=True)
        try:
            for statement in _SERVER_KEEPALIVES:
                conn.execute(statement)
            row = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [LOCK]).fetchone()
        except psycopg.Error:
            conn.close()
            raise
        if not (row and row[0]):
            conn.close()
            return False
        self._conn = conn
        return True

    def check(self) -> bool:
        """True while the session (and so the lock) is alive."""
        if self._conn is None:
            return False
        try:
            self._conn.execute("SELECT 1")
        except psycopg.Error:
            self.release()
            return False
        return True

    def release(self) -> None:
        """Give the lead up (closing the session frees the lock)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):  # the session is gone, and the lock too
                conn.close()


class Manager:
    """Campaigns for the lead; while leading, runs its loops; stands by otherwise."""

    def __init__(
        self,
        *,
        stop: threading.Event,
        loops: Any,
        check_seconds: float = CHECK_SECONDS,
        campaign_seconds: float = CAMPAIGN_SECONDS,
    ) -> None:
        self.stop = stop
        #: Called at each new term with the term's stop event: the loops to run.
        self.make_loops = loops
        self.check_seconds = check_seconds
        self.campaign_seconds = campaign_seconds
        self.leader = Leader()
        self.loops: list[Loop] = []
        self.terms = 0

    def healthy(self) -> bool:
        """A standby is healthy; a leader is while every loop still turns."""
        return all(loop.healthy() for loop in self.loops) if self.leader.held else True

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    leading = self.leader.acquire()
                except psycopg.Error as exc:
                    logger.warning(
                        "cannot campaign for the lead: the database did not answer",
                        extra={"action": "leader_campaign_failed", "error": type(exc).__name__},
                    )
                    leading = False
                if leading:
                    self._lead()
                else:
                    self.stop.wait(self.campaign_seconds)
        finally:
            self.leader.release()
            metrics.WATCHER_LEADER.set(0)

    def _lead(self) -> None:
        self.terms += 1
        term = threading.Event()
        self.loops = list(self.make_loops(term))
        threads = [
            threading.Thread(target=loop.run, name=f"watch-{i}", daemon=True)
            for i, loop in enumerate(self.loops)
        ]
        logger.info("leading: watches started", extra={"action": "leader_elected"})
        metrics.WATCHER_LEADER.set(1)
        for thread in threads:
            thread.start()
        try:
            while not self.stop.wait(self.check_seconds):
                if not self.leader.check():
                    logger.warning(
                        "lost the lead (its database session ended): watches stop",
                        extra={"action": "leader_lost"},
                    )
                    break
        finally:
            term.set()
            # Loops end at their next event or pass; when the process stops, not for long
            # (the threads are daemons, and what they cut short the next leader redoes).
            deadline = time.monotonic() + (2 if self.stop.is_set() else 30)
            for thread in threads:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
            self.leader.release()
            metrics.WATCHER_LEADER.set(0)
            self.loops = []
