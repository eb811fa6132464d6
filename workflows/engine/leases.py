"""Leases on steps: who is attempting a step, until when, and the heartbeat that extends them.

An attempt claims its step by lease (workflows.engine.attempts): the step row names the
owner (this process), the expiry and a token (the row's claim counter). While the step's
code runs, no transaction is open, so nothing but the lease keeps another worker from
claiming the step too. A step's code may run for minutes (a helm install, a Job), so the
process extends its leases every third of their length: one statement per tick, from a
daemon thread with its own database connection, started the first time a lease is held.
A lease is held from its claim until its outcome is recorded (workflows.engine.scheduling,
polls), not only while its step's code runs: an outcome may wait while the same task runs
another run's next step. A killed process stops extending, and its steps are claimed again
once the leases pass; so does a live one stalled for two thirds of a lease (CPU starvation,
a database that does not answer), and its late outcome is then dropped: a step's code may
run more than once, never its recorded outcome (invariant 4 keeps its side effect once).

Extending never waits for a row another transaction holds (SKIP LOCKED): that transaction
is either this attempt recording its outcome or an operator moving the step on, which
ends the lease anyway; the next tick tries again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence

from django.db import close_old_connections, connection, transaction

from workflows.engine import clock, sql

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Lease:
    """A claim on one step: recorded only while the row still carries this token and owner."""

    step_id: int
    #: The step's claim counter after this claim; a later claim changes it.
    token: int
    owner: str
    seconds: float


@functools.cache
def _owner(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}"


def owner() -> str:
    """This process, as lease rows name it (for operators: which worker holds a step)."""
    return _owner(os.getpid())


def expiry(seconds: float) -> datetime.datetime:
    return clock.now() + datetime.timedelta(seconds=seconds)


#: The heartbeat thread looks at the leases it holds at least this often.
_IDLE_TICK_SECONDS = 1.0


@dataclasses.dataclass
class _Held:
    lease: Lease
    #: Attempts holding it now (a batch holds its steps, and each attempt its own).
    holders: int
    #: When to extend it next (time.monotonic()).
    next_at: float


class _Heartbeat:
    """Extends the leases this process holds, every third of their length, until released."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._held: dict[tuple[int, int], _Held] = {}
        self._pid: int | None = None

    def holding(self) -> set[int]:
        """The steps whose leases this process extends now."""
        with self._lock:
            return {step_id for step_id, _ in self._held}

    @contextlib.contextmanager
    def hold(self, leases: Sequence[Lease]) -> Iterator[None]:
        """Extend `leases` while the block runs."""
        if not leases:
            yield
            return
        start = time.monotonic()
        with self._lock:
            self._start()
            for lease in leases:
                held = self._held.get((lease.step_id, lease.token))
                if held is None:
                    self._held[(lease.step_id, lease.token)] = _Held(
                        lease, 1, start + lease.seconds / 3
                    )
                else:
                    held.holders += 1
            # The thread looks at least every IDLE_TICK_SECONDS: wake it only for a lease
            # due sooner (waking it for every short attempt costs each a thread switch).
            if any(lease.seconds / 3 < _IDLE_TICK_SECONDS for lease in leases):
                self._lock.notify()
        try:
            yield
        finally:
            with self._lock:
                for lease in leases:
                    key = (lease.step_id, lease.token)
                    held = self._held.get(key)
                    if held is not None:
                        held.holders -= 1
                        if held.holders <= 0:
                            del self._held[key]

    def _start(self) -> None:
        """One thread per process; a forked worker process starts its own."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._held.clear()
        threading.Thread(target=self._run, name="step-lease-heartbeat", daemon=True).start()

    def _run(self) -> None:
        while True:
            due = self._wait_for_due()
            try:
                _extend(due)
            except Exception:
                # The next tick tries again; a lease that passes meanwhile is claimed again,
                # and this attempt's outcome is then dropped (never written twice).
                logger.warning(
                    "step leases not extended",
                    extra={"action": "lease_extend_failed"},
                    exc_info=True,
                )
                close_old_connections()

    def _wait_for_due(self) -> list[Lease]:
        with self._lock:
            while True:
                now = time.monotonic()
                due = [held for held in self._held.values() if held.next_at <= now]
                if due:
                    for held in due:
                        held.next_at = now + held.lease.seconds / 3
                    return [held.lease for held in due]
                upcoming = [held.next_at - now for held in self._held.values()]
                self._lock.wait(timeout=min([*upcoming, _IDLE_TICK_SECONDS]))


def _extend(leases: Sequence[Lease]) -> None:
    """Move the expiry of each lease that this process still holds; one statement."""
    ids = [lease.step_id for lease in leases]
    tokens = [lease.token for lease in leases]
    expires = [expiry(lease.seconds) for lease in leases]
    extended = sql.execute(sql.EXTEND_LEASES, [ids, tokens, expires, owner()])
    logger.debug(
        "step leases extended",
        extra={"action": "lease_extended", "steps": ids, "extended": extended},
    )
    # A long-lived connection of a thread that mostly sleeps: drop it when it broke.
    if connection.connection is not None and not connection.is_usable():
        connection.close()


heartbeat = _Heartbeat()


def no_transaction_open() -> None:
    """Invariant 8: a step's code (and its cleanup) runs with no transaction open.

    With no transaction open no row lock can be held: the lease is all that holds the
    step. An empty durable atomic block is the check, because Django refuses to open one
    inside any other atomic block except the one its test cases wrap each test in.
    """
    try:
        with transaction.atomic(durable=True):
            pass
    except RuntimeError as exc:
        raise RuntimeError(
            "a step's code must run with no database transaction open (invariant 8)"
        ) from exc
