"""A step's life, in one place: for a step's state and an event, the write that follows.

Every change of a step's state is decided here and only here, as a `Write`: the state it
moves to, the columns it writes, what the row must be in (its states; for an attempt's
outcome, its lease), and what follows once it commits (a RunEvent, a countdown message,
the type's cleanup, an Event for a person, the run's message). The executor,
workflows.engine.stepstate, applies a Write and decides nothing; `route` picks how (under
the run's lock, or a fast path: each a rendering of the same Write). This is also the only
reader of the step types' flags (inline, waiting message, waits for a person, says its own
wait, cleanup, least time, bounds). docs/engine.md, "A step's life", is the table of these
events and the bound of every state.

- `created`: the row a run starts with (pending, its bounds from its type).
- `promote`: pending -> ready once every dependency is done (which PostgreSQL judges:
  workflows_step_deps_done, migration 0018).
- a claim leases a due step (workflows_step_claimable; queries.sql `claim_*` write
  `CLAIM_COLUMNS`): it starts the step's clock and counts an attempt not recorded yet.
- `before_call`: what an attempt comes to without calling the code (timed out; the worker
  died running it `STEP_LOST_ATTEMPTS` times).
- `after`: an attempt's outcome (done, poll, temporary or permanent error, handed back).
- `retried`, `requeued`, `cancelled`, `skipped`, `approved`: operators and the deadline.
- the heartbeat and the reaper end leases (queries.sql `free_leases*`) and change no state.

Pure: no database, no broker, no clock (times are given). .importlinter keeps it so.
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.conf import settings

from workflows import errors
from workflows.engine import messages
from workflows.engine.writes import Event, Path, Result, Route, StepRow, Write
from workflows.states import STEP_DUE, STEP_FINISHED, Step
from workflows.steps import memo as memo_keys
from workflows.steps import registry

#: What ends a lease. Every write by an operator, the deadline or an attempt's outcome has
#: it, so an attempt still running finds its lease lost; the attempt that held it is then
#: accounted for (recorded or preempted), not counted as lost (`before_call`). The heartbeat
#: and the reaper end leases without it (queries.sql `free_leases`, `free_leases_of`).
ENDS_LEASE: Mapping[str, Any] = {"lease_owner": "", "lease_expires_at": None, "unrecorded": 0}

#: What every claim writes (each `claim_*` statement of queries.sql sets exactly these:
#: tests/workflows/test_lifecycle_home.py): the lease (owner; expiry: the call's bound and
#: the claim's own length), its token (claims), one attempt more not recorded yet
#: (unrecorded), the holder of a lease it takes over once passed (lost_by: that attempt
#: was lost; the reaper writes it too), and the step's clock (started_at, set by its first
#: claim).
CLAIM_COLUMNS = ("lease_owner", "lease_expires_at", "claims", "unrecorded", "lost_by")
CLAIM_STARTS = "started_at"

#: The columns a repeated poll may write (queries.sql `record_repeats` takes exactly these).
REPEAT_COLUMNS = ("due_at", "memo", "message", "output", "started_at", *ENDS_LEASE)


# --- A run's steps as they start, and the step types' flags ---------------------------------


def created(
    *, type_name: str, params: Mapping[str, Any], timeout: int | None, stall: int | None
) -> dict[str, Any]:
    """The columns a step's row starts with: pending, its bounds from its type where the
    template gives none (the whole step's, one call's, the stall's) and whether only a
    person ends its waiting. An unknown type fails at its first attempt."""
    found = registry.find(type_name)
    return {
        "state": Step.PENDING,
        "timeout_seconds": timeout
        if timeout is not None
        else (found.default_timeout_seconds if found else registry.DEFAULT_TIMEOUT_SECONDS),
        "call_timeout_seconds": found.call_timeout_seconds
        if found
        else registry.DEFAULT_CALL_TIMEOUT_SECONDS,
        "waits_for_person": bool(found and found.waits_for_person),
        "stall_seconds": stall
        if stall is not None
        else (found.normal_seconds(params) if found else registry.DEFAULT_STALL_SECONDS),
    }


def promote(at: datetime.datetime) -> Write:
    """Its dependencies are done: due now (a routine move, no event)."""
    return Write(Step.READY, {"due_at": at}, allowed_from=(Step.PENDING,))


def inline(type_name: str) -> bool:
    """Steps of this type run at once in their run's scheduling (no I/O, no side effect):
    chained, committed asynchronously (were a commit lost, they would run again alike)."""
    found = registry.find(type_name)
    return found is not None and found.inline


def inline_types() -> list[str]:
    return registry.inline_names()


def waits_for_person(type_name: str) -> bool:
    return registry.waits_for_person(type_name)


def least_seconds(type_name: str, params: Mapping[str, Any]) -> float:
    """The least time a step of this type takes from its first attempt (a `wait`'s seconds)."""
    return registry.least_seconds(type_name, params)


def _says_own_wait(type_name: str) -> bool:
    found = registry.find(type_name)
    return found is not None and found.says_own_wait


def _cleans_up(step: StepRow) -> bool:
    """A step that was ever claimed may have acted (a claim starts its clock)."""
    found = registry.find(step.type)
    return step.started_at is not None and found is not None and found.cleanup is not None


# --- An attempt ------------------------------------------------------------------------------


def deadline(step: StepRow) -> datetime.datetime | None:
    """When the step fails for its timeoutSeconds: its clock (first claim) plus its bound."""
    if step.started_at is None or not step.timeout_seconds:
        return None
    return step.started_at + datetime.timedelta(seconds=step.timeout_seconds)


def call_seconds(step: StepRow, at: datetime.datetime) -> tuple[float, bool]:
    """How long this attempt waits for the step's code, and whether that is its deadline:
    its call's bound (the row's, from its type when the run started; an older row's: its
    type's), or less, what is left of the step's timeoutSeconds."""
    found = registry.find(step.type)
    bound = float(step.call_timeout_seconds or (found.call_timeout_seconds if found else 0) or 0)
    ends = deadline(step)
    if ends is not None and (ends - at).total_seconds() <= bound:
        return (ends - at).total_seconds(), True
    return bound, False


def before_call(step: StepRow, at: datetime.datetime) -> errors.StepError | None:
    """What an attempt comes to without calling the step's code, or None: call it.

    Its deadline passed (a step whose attempts never record is bounded by it too: a claim
    starts its clock), or more attempts in a row than STEP_LOST_ATTEMPTS ended without an
    outcome: the worker died running it each time (killed, out of memory, a step type that
    crashes its process). `step.unrecorded` counts this attempt too.
    """
    ends = deadline(step)
    if ends is not None and at >= ends:
        return errors.PermanentError(messages.step_timed_out(step.timeout_seconds or 0))
    lost = step.unrecorded - 1
    if lost >= int(settings.STEP_LOST_ATTEMPTS):
        return errors.PermanentError(messages.step_attempts_lost(lost, step.lost_by))
    return None


def timed_out(step: StepRow, *, at_deadline: bool, seconds: float) -> errors.StepError:
    """A call abandoned at its bound: the step's timeout at its deadline (permanent), else a
    temporary error the error budget judges."""
    if at_deadline:
        return errors.PermanentError(messages.step_timed_out(step.timeout_seconds or 0))
    return errors.TemporaryError(messages.step_call_timed_out(int(seconds)))


#: Backoff of failed attempts: base * 2^(n-1), capped, with full jitter.
BACKOFF_BASE_SECONDS = 2.0
BACKOFF_CAP_SECONDS = 300.0


def _full_jitter(cap: float) -> float:
    # Spreads retries; not a secret, so the standard generator is right (bandit B311).
    return random.uniform(0, cap)  # noqa: S311  # nosec B311


#: Test seam: replaced to make backoff deterministic.
jitter: Callable[[float], float] = _full_jitter


def backoff(failures: int) -> float:
    """Seconds before attempt `failures + 1`: exponential, capped, with full jitter."""
    cap = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (failures - 1))
    return max(0.5, jitter(cap))


def within_budget(step: StepRow, *, failures: int, lasted: float) -> bool:
    """A streak of `failures` temporary errors in a row, over `lasted` seconds, may go on:
    it fails the step only past both `retries` and `retry_for_seconds`."""
    return failures <= step.retries or lasted < step.retry_for_seconds


#: What progress writes: the streak of failures, if any, is over.
PROGRESS: Mapping[str, Any] = {"failures": 0, "failing_since": None}


def after(result: Result) -> Write:
    """The step's next state after an attempt, by its lease (the error budget included)."""
    step, outcome, at = result.step, result.outcome, result.at
    if result.repeats:
        return _repeat(result)
    common: dict[str, Any] = {"memo": result.memo, "started_at": result.started, **ENDS_LEASE}
    if isinstance(outcome, registry.Done):
        done = {**common, "output": dict(outcome.output), "message": "", **_finished(at)}
        return _by_lease(Step.SUCCEEDED, done)
    if isinstance(outcome, registry.Poll):
        if outcome.output is not None:
            common["output"] = dict(outcome.output)
        message = messages.fit(outcome.message)
        return _by_lease(
            Step.WAITING,
            {**common, **PROGRESS, "due_at": _after(at, outcome.after), "message": message},
            countdown=needs_countdown(Step.WAITING, outcome.after, on_time=outcome.on_time),
            announce_person=waits_for_person(step.type),
        )
    if outcome is None:  # never: an unattempted step repeats (handed back), decided above
        raise ValueError(f"step {step.name}: a result without an outcome moves nothing")
    failures = step.failures + 1
    # The streak began when its first failed attempt did; it lasts until this one ended.
    since = step.failing_since or at
    ended = result.ended or at
    common.update(failures=failures, failing_since=since, message=messages.fit(outcome.message))
    if outcome.output is not None:
        common["output"] = dict(outcome.output)
    lasted = (ended - since).total_seconds()
    if isinstance(outcome, errors.TemporaryError) and within_budget(
        step, failures=failures, lasted=lasted
    ):
        delay = outcome.delay if outcome.delay is not None else backoff(failures)
        retry = {**common, "due_at": _after(ended, delay)}
        return _by_lease(Step.READY, retry, event=Event.RETRY, countdown=True)
    failed = {**common, **_finished(ended)}
    return _by_lease(Step.FAILED, failed, event=Event.TRANSITION, cleanup=_cleans_up(step))


def ahead(result: Result) -> Write | None:
    """The Write of an inline step run ahead of its claim (a chain runs a pending step whose
    dependencies its own successes make done, and records it with them: queries.sql
    `succeed_and_claim_next`): pending -> succeeded, as a success by lease writes it, when
    its outcome is done; None otherwise (it is claimed and run again in its turn). Sound
    because an inline step's code is pure (no I/O, no side effect: running it again, or
    twice at once, comes to the same), and the statement writes it only while its row is
    still pending with the memo its code saw, under its run's lock: docs/engine.md, "Steps
    run ahead of their claim"."""
    if not inline(result.step.type) or not isinstance(result.outcome, registry.Done):
        return None
    done = after(result)
    return Write(done.to, done.columns, allowed_from=(Step.PENDING,))


def may_run_ahead(step: StepRow, *, done: set[str], pending: set[str]) -> bool:
    """Whether a chain runs the pending `step` ahead of its claim: it is inline, it is not
    the run's last pending step (`pending`: those not run yet; the run ends through its
    last step's claim, Path.FINISH, which checks the deadline), and each of its
    dependencies is done here (`done`: the chain's success, and the steps run ahead before
    it) or is no pending step (the chain's statement gives a run's pending steps only when
    no other step of it is unfinished). PostgreSQL judges it again as it writes
    (workflows_step_deps_done): this only spares running what would not be written."""
    depends_on = step.depends_on or []
    return (
        inline(step.type)
        and len(pending) > 1
        and all(d in done or d not in pending for d in depends_on)
    )


def _by_lease(to: str, columns: Mapping[str, Any], **follow: Any) -> Write:
    return Write(to, columns, allowed_from=STEP_DUE, by_lease=True, **follow)


def _finished(at: datetime.datetime) -> dict[str, Any]:
    return {"finished_at": at, "due_at": None}


def _after(at: datetime.datetime, seconds: float) -> datetime.datetime:
    return at + datetime.timedelta(seconds=max(0.0, seconds))


def _repeat(result: Result) -> Write:
    """A waiting step polls again: its next due time, and what differs from the row. A
    waiting step has no streak of failures to end: a failed attempt makes it ready, and its
    next poll is a first one again."""
    step, outcome, at = result.step, result.outcome, result.at
    changes: dict[str, Any] = {**ENDS_LEASE}
    if step.started_at is None:
        changes["started_at"] = result.started
    if not isinstance(outcome, registry.Poll):  # handed back: due at once, nothing else
        return Write(Step.WAITING, {**changes, "due_at": at}, (Step.WAITING,), by_lease=True)
    changes["due_at"] = _after(at, outcome.after)
    if result.memo != step.memo:
        changes["memo"] = result.memo
    said = messages.fit(outcome.message)
    if said != step.message:
        changes["message"] = said
    if outcome.output is not None and dict(outcome.output) != step.output:
        changes["output"] = dict(outcome.output)
    retell = None
    if said != step.message and _says_own_wait(step.type):
        name = result.run_name
        retell = (
            messages.run_waits(name, step.message, step.name),
            messages.run_waits(name, said, step.name),
        )
    return Write(
        Step.WAITING,
        changes,
        (Step.WAITING,),
        by_lease=True,
        countdown=needs_countdown(Step.WAITING, outcome.after, on_time=outcome.on_time),
        retell=retell,
    )


def dropped(current_state: str | None, step: StepRow) -> bool:
    """An outcome whose lease was lost is not written; whether to clean up: if the step was
    cancelled meanwhile, this late attempt may have made something after the cancel's
    cleanup ran."""
    found = registry.find(step.type)
    return current_state == Step.CANCELLED and found is not None and found.cleanup is not None


def route(write: Write, result: Result) -> Route:
    """How an attempt's Write is applied: the one choice of a fast path.

    A repeated poll goes on its own row (batched). A first poll its run does not show (its
    type declares no waiting message, waits for no person, does not say its own wait: a
    `wait`) goes on its own row while its run names the step. A success that does not end
    its run records itself and claims the inline steps it makes due, one statement; one that
    ends it (its run's last unfinished step) records itself and finishes the run, one
    statement. Anything else goes under the run's lock, in its scheduling transaction.
    """
    step = result.step
    quick = inline(step.type)
    if result.repeats:
        return Route(Path.REPEAT, asynchronous=True)
    if write.to == Step.SUCCEEDED:
        return Route(Path.FINISH if result.last else Path.CHAIN, asynchronous=quick)
    if (
        write.to == Step.WAITING
        and step.state == Step.READY
        and not waits_for_person(step.type)
        and not _says_own_wait(step.type)
        and not registry.waiting_message(step.type)
    ):
        says = messages.run_running_step(result.run_name, step.name)
        return Route(Path.ALONE, run_says=says, asynchronous=quick)
    return Route(Path.SCHEDULE, asynchronous=quick)


# --- When the engine acts ----------------------------------------------------------------------

#: Poll.on_time gets a countdown up to this far ahead: beyond, a beat is under 3% of the wait,
#: and an ETA message sits unacked so long (kombu's redis QoS.restore_visible redelivers it).
ON_TIME_MAX_SECONDS = 30.0
#: How long after a step comes due the engine has recorded its outcome and settled the run,
#: when a countdown message polls it (the worker runs it at its ETA).
ENGINE_MARGIN_SECONDS = 0.25


def needs_countdown(state: str, after: float, *, on_time: bool = False) -> bool:
    """A retry and a short wait get a countdown message; a long wait is the batch poller's
    (it saves a message per poll for up to a beat period of latency: worth it only for long
    waits, and for a timer's end, polled once, only past ON_TIME_MAX_SECONDS)."""
    limit = ON_TIME_MAX_SECONDS if on_time else settings.POLL_BATCH_MIN_WAIT_SECONDS
    return state != Step.WAITING or after < limit


def acts_within(state: str, ahead: float) -> float:
    """How long after a step comes due the engine has acted on it, for a step whose due time
    was set `ahead` seconds before: a batched one up to a beat late, any other at its
    countdown. The hook path adds it to a recorded due_at (workflows.hookpath.retry)."""
    if not needs_countdown(state, ahead):
        return float(settings.POLL_BATCH_SECONDS) + ENGINE_MARGIN_SECONDS
    return ENGINE_MARGIN_SECONDS


def behind(late: float) -> bool:
    """The engine's oldest due work (queries.sql `engine_late`) is later than a batch poll's
    period and a margin: more than its normal lag, so it works through a backlog."""
    return late > settings.POLL_BATCH_SECONDS + ENGINE_MARGIN_SECONDS


# --- Operators and the deadline -------------------------------------------------------------


def retried(step: StepRow) -> Write:
    """An operator retries a failed or cancelled step from the start, as a new generation:
    what it creates gets new names, so the failed attempt's objects are not taken for its."""
    generation = int(step.memo.get(memo_keys.GENERATION, 0)) + 1
    fresh = {"memo": {memo_keys.GENERATION: generation}, "message": "", "started_at": None}
    return Write(
        Step.PENDING,
        {**fresh, **PROGRESS, "due_at": None, "finished_at": None, **ENDS_LEASE},
        allowed_from=(Step.FAILED, Step.CANCELLED),
        event=Event.TRANSITION,
    )


def requeued() -> Write:
    """A step cancelled with its run goes back to wait for its turn when the run is retried."""
    return Write(Step.PENDING, {"finished_at": None, **ENDS_LEASE}, (Step.CANCELLED,))


def cancelled(step: StepRow, at: datetime.datetime) -> Write:
    """An operator cancels the run, or its deadline fails it: an unfinished step stops, and
    what it may have made is cleaned up (an attempt running now finds its lease lost)."""
    return Write(
        Step.CANCELLED,
        {**_finished(at), **ENDS_LEASE},
        # Any unfinished state: a first poll may move it on its own row meanwhile.
        allowed_from=(Step.PENDING, *STEP_DUE),
        cleanup=_cleans_up(step),
    )


def skipped(step: StepRow, at: datetime.datetime) -> Write:
    """An operator skips a step: its dependents go on as if it had succeeded."""
    return Write(
        Step.SKIPPED,
        {"message": messages.STEP_SKIPPED, **_finished(at), **ENDS_LEASE},
        allowed_from=(step.state,),
        event=Event.TRANSITION,
    )


def approvable(step: StepRow) -> str:
    """Why `step` cannot be approved ("" if it can)."""
    if not waits_for_person(step.type):
        return f"step {step.name!r} is a {step.type} step, not an approval"
    if step.state in STEP_FINISHED:
        return f"step {step.name!r} is already {step.state}"
    return ""


def approved(step: StepRow, *, by: str, reason: str, at: datetime.datetime) -> Write:
    """A person approves a step that waits for one: its memo says so, and it is due now (a
    pending one when it comes due); an attempt polling it now finds its lease lost."""
    memo = {**step.memo, memo_keys.APPROVED_BY: by, memo_keys.APPROVAL_REASON: reason}
    due = step.due_at if step.state == Step.PENDING else at
    return Write(
        step.state,
        {"memo": memo, "due_at": due, **ENDS_LEASE},
        allowed_from=(step.state,),
        countdown=step.state != Step.PENDING,
    )


# --- What a run says ---------------------------------------------------------------------------


def run_message(run_name: str, steps: Sequence[StepRow]) -> str:
    """What a running run says: its first due step, and how that one waits."""
    current = next((s for s in steps if s.state in STEP_DUE), None)
    if current is None:
        return messages.run_running(run_name)
    if current.state == Step.WAITING and current.message and _says_own_wait(current.type):
        return messages.run_waits(run_name, current.message, current.name)
    waiting = registry.waiting_message(current.type)
    if waiting and current.state == Step.WAITING:
        return messages.run_waiting_at_step(run_name, waiting, current.name)
    return messages.run_running_step(run_name, current.name)


def asks_person(step: StepRow) -> tuple[str, str]:
    """How a step that waits for a person waits ("waiting for approval"), and what it asks."""
    return registry.waiting_message(step.type), registry.asks(step.params, waits_for_person=True)
