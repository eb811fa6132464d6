"""Leases on steps: who is attempting a step, until when, and the heartbeat that vouches for them.

An attempt claims its step by lease (workflows.engine.attempts): the step row names the
owner (this process: host:pid:nonce), the expiry and a token (the row's claim counter).
While the step's code runs, no transaction is open, so nothing but the lease keeps another
worker from claiming the step too. A lease lasts its call's bound and STEP_LEASE_SECONDS
more (queries.sql `claim_steps`): an attempt returns by its bound (workflows.engine.calls), so
nothing writes to a step while its code runs. A lease is held from its claim until its
outcome is recorded (workflows.engine.scheduling, polls), not only while its step's code
runs: an outcome may wait while the same task runs another run's next step, and only such
a wait past the lease's length extends it (every third of STEP_LEASE_SECONDS after that).

That a lease's owner lives is said once per process, not per step: while it holds leases
(or has just claimed), the process' heartbeat thread writes its WorkerBeat row every
WORKER_BEAT_SECONDS, on its own database connection, in one statement. A process whose row
is older than WORKER_DEAD_SECONDS is dead, and its leases are freed by a reaper
(workflows.engine.workers) long before they would pass: a killed worker's step is claimed
again within seconds. A live process stalled that long (CPU starvation, a database that
does not answer) is taken for dead too, and its late outcome is then dropped: a step's code
may run more than once, never its recorded outcome (invariant 4 keeps its side effect once).

Extending never waits for a row another transaction holds (SKIP LOCKED): that transaction
is either this attempt recording its outcome or an operator moving the step on, which
ends the lease anyway; the next tick tries again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import math
import os
import secrets
import socket
import threading
from collections.abc import Iterator, Sequence

from django.conf import settings
from django.db import connection, transaction

from workflows import clock
from workflows.engine import sql, stepstate

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Lease:
    """A claim on one step: recorded only while the row still carries this token and owner."""

    step_id: int
    #: The step's claim counter after this claim; a later claim changes it.
    token: int
    owner: str
    #: The lease's own length, and the call's bound it lasts beyond (0: an inline step's).
    seconds: float
    bound: float = 0.0
    #: When the heartbeat extends it first (clock.monotonic()): a third of its own length
    #: after its bound, had its outcome not been recorded by then.
    renew_at: float = dataclasses.field(default=0.0, compare=False)

    def __post_init__(self) -> None:
        if not self.renew_at:
            object.__setattr__(self, "renew_at", clock.monotonic() + self.bound + self.seconds / 3)


def _owner(pid: int) -> str:
    # A nonce per start: a pid the kernel hands out again is another owner, never this one.
    return f"{socket.gethostname()}:{pid}:{secrets.token_hex(4)}"


#: This process' owner, made once per pid (a forked process makes its own), under a lock:
#: two threads asking first at once must not get two owners (a claim's and the heartbeat's).
_owners: dict[int, str] = {}
_owners_lock = threading.Lock()


def owner() -> str:
    """This process, as lease rows and its heartbeat row name it (for operators: which
    worker holds a step)."""
    pid = os.getpid()
    found = _owners.get(pid)
    if found is None:
        with _owners_lock:
            found = _owners.setdefault(pid, _owner(pid))
    return found


def expiry(seconds: float) -> datetime.datetime:
    return clock.now() + datetime.timedelta(seconds=seconds)


#: The heartbeat thread looks at the leases it holds at least this often.
_IDLE_TICK_SECONDS = 1.0


@dataclasses.dataclass
class _Held:
    lease: Lease
    #: Attempts holding it now (a batch holds its steps, and each attempt its own).
    holders: int
    #: When to extend it next (clock.monotonic()).
    next_at: float


class _Heartbeat:
    """Beats for this process while it holds leases, and extends those held past their length."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._held: dict[tuple[int, int], _Held] = {}
        self._pid: int | None = None
        #: When this process last wrote its heartbeat row, and last claimed (clock.monotonic()).
        self._beat_at = -math.inf
        self._claimed_at = -math.inf
        #: Leases whose outcome a failure kept from being recorded: to free.
        self._unrecorded: set[Lease] = set()
        #: Never set: the thread's pause after a failed tick.
        self._pause = threading.Event()

    def holding(self) -> set[int]:
        """The steps whose leases this process holds now."""
        with self._lock:
            return {step_id for step_id, _ in self._held}

    def beating(self) -> None:
        """Before a claim: this process' heartbeat row is fresh, written now (in the caller's
        transaction, with the claim) if the thread has not written it lately."""
        now = clock.monotonic()
        with self._lock:
            self._start()
            self._claimed_at = now
            fresh = now - self._beat_at < settings.WORKER_BEAT_SECONDS
        if not fresh:
            sql.named("worker_beat", {"owner": owner()})
            # Fresh once it commits: a claim's transaction that rolls back takes it along.
            transaction.on_commit(lambda: self._beaten(now))

    def _beaten(self, at: float) -> None:
        with self._lock:
            self._beat_at = max(self._beat_at, at)
            self._lock.notify()

    def rest(self) -> None:
        """Beat no more unless leases are held (a test session's end: its database goes)."""
        with self._lock:
            self._claimed_at = -math.inf

    @contextlib.contextmanager
    def hold(self, leases: Sequence[Lease]) -> Iterator[None]:
        """Hold `leases` while the block runs: beat, and extend any held past its length."""
        if not leases:
            yield
            return
        with self._lock:
            self._start()
            for lease in leases:
                held = self._held.get((lease.step_id, lease.token))
                if held is None:
                    self._held[(lease.step_id, lease.token)] = _Held(lease, 1, lease.renew_at)
                else:
                    held.holders += 1
            # The thread looks at least every IDLE_TICK_SECONDS: wake it only for a lease
            # due sooner (waking it for every short attempt costs each a thread switch).
            if any(lease.seconds / 3 < _IDLE_TICK_SECONDS for lease in leases):
                self._lock.notify()
        try:
            yield
        except BaseException:
            # The outcome was not recorded (the database went away mid-record, a bug): the
            # lease must not keep the step until its call's bound passes. Freed by the
            # thread as soon as the database answers (a recorded one no longer matches).
            with self._lock:
                self._unrecorded.update(leases)
                self._lock.notify()
            raise
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
        self._unrecorded.clear()
        self._beat_at = self._claimed_at = -math.inf
        threading.Thread(target=self._run, name="step-lease-heartbeat", daemon=True).start()

    def _run(self) -> None:
        while True:
            due, beat = self._wait_for_due()
            try:
                if beat:
                    sql.named("worker_beat", {"owner": owner()})
                    with self._lock:
                        self._beat_at = beat
                if due:
                    _extend(due)
                self._free_unrecorded()
            except Exception:
                # The next tick tries again; a lease that passes meanwhile (or a heartbeat
                # that ages past WORKER_DEAD_SECONDS) lets its step be claimed again, and this
                # attempt's outcome is then dropped (never written twice).
                logger.warning(
                    "step leases not extended or heartbeat not written",
                    extra={"action": "lease_extend_failed"},
                    exc_info=True,
                )
                # A connection that broke is made again at the next tick, a second later:
                # a database that does not answer is not asked in a loop.
                connection.close()
                self._pause.wait(_IDLE_TICK_SECONDS)
            else:
                # A long-lived connection of a thread that mostly sleeps: drop it when it broke.
                if connection.connection is not None and not connection.is_usable():
                    connection.close()

    def _free_unrecorded(self) -> None:
        with self._lock:
            unrecorded = list(self._unrecorded)
        if unrecorded:
            _free(unrecorded)
            with self._lock:
                self._unrecorded.difference_update(unrecorded)

    def _wait_for_due(self) -> tuple[list[Lease], float]:
        """The leases to extend now, and the time to beat at (0: no beat due)."""
        beat_every = settings.WORKER_BEAT_SECONDS
        with self._lock:
            while True:
                now = clock.monotonic()
                due = [held for held in self._held.values() if held.next_at <= now]
                for held in due:
                    held.next_at = now + held.lease.seconds / 3
                busy = bool(self._held) or now - self._claimed_at < beat_every
                beat = busy and now - self._beat_at >= beat_every
                if due or beat or self._unrecorded:
                    return [held.lease for held in due], now if beat else 0.0
                upcoming = [held.next_at - now for held in self._held.values()]
                if busy:
                    upcoming.append(self._beat_at + beat_every - now)
                self._lock.wait(timeout=max(0.01, min([*upcoming, _IDLE_TICK_SECONDS])))


def _extend(leases: Sequence[Lease]) -> None:
    """Move the expiry of each lease that this process still holds; one statement."""
    ids = [lease.step_id for lease in leases]
    tokens = [lease.token for lease in leases]
    expires = [expiry(lease.seconds) for lease in leases]
    extended = stepstate.extend_leases(ids, tokens, expires, owner())
    logger.debug(
        "step leases extended",
        extra={"action": "lease_extended", "steps": ids, "extended": extended},
    )


def _free(leases: Sequence[Lease]) -> None:
    """End the leases this process still holds of outcomes it could not record; one statement.
    Their steps are due: the reconciler or the batch poller attempts them again."""
    freed = stepstate.free_leases(
        [lease.step_id for lease in leases], [lease.token for lease in leases], owner()
    )
    logger.warning(
        "leases of unrecorded outcomes freed",
        extra={
            "action": "lease_freed",
            "steps": [lease.step_id for lease in leases],
            "freed": freed,
        },
    )


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
