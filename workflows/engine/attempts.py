"""One way to attempt a step: claim it by lease, run its code with no transaction open, record.

`claim` (workflows.engine.claims) leases due steps in one compare-and-set UPDATE (by id,
or the batch poller's most overdue waiting steps) and commits with the caller's
transaction, or at once. `run` calls the step's function once, with no transaction open
and no row lock held (checked), while the heartbeat extends the lease
(workflows.engine.leases). `record` writes outcomes by compare-and-set on the same
lease: repeated polls of waiting steps in one statement, a first poll that its run's
answer does not show on its step's row alone, every other outcome as a transition inside
the run's scheduling transaction (workflows.engine.scheduling holds the run's lock); a
chain's success and the claim of what it makes due are one statement. An outcome whose lease
was lost (it passed and the step was claimed again, or an operator moved the step) is
dropped and logged, never written. `decide` is the retry policy, a pure function:
failed attempts are retried with exponential backoff and full jitter, up to `retries`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from workflows import errors
from workflows.engine import (
    claims,
    cleanups,
    clock,
    dispatch,
    leases,
    messages,
    observe,
    sql,
    transitions,
)
from workflows.engine.claims import Attempt, claim
from workflows.models import StepRun
from workflows.steps import registry

# The claim is the first of an attempt's two functions: callers find it here, with record.
__all__ = [
    "Attempt",
    "Decision",
    "Recorded",
    "Result",
    "backoff",
    "can_claim_next",
    "claim",
    "decide",
    "execute_once",
    "hand_back",
    "needs_countdown",
    "record",
    "record_first_poll",
    "run",
    "starts_waiting_alone",
]

logger = logging.getLogger(__name__)

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


#: Poll.on_time gets a countdown up to this far ahead: beyond, a beat is under 3% of the wait,
#: and an ETA message sits unacked so long (kombu's redis QoS.restore_visible redelivers it).
ON_TIME_MAX_SECONDS = 30.0


def needs_countdown(state: str, after: float, *, on_time: bool = False) -> bool:
    """A retry and a short wait get a countdown message; a long wait is the batch poller's.

    Batched polls (workflows.engine.polls) find waiting steps by their due_at, which saves a
    message per poll but adds up to a beat period of latency: worth it only for long waits,
    and for a timer's end (`on_time`: polled once, not every few seconds) only past 30 s.
    """
    limit = ON_TIME_MAX_SECONDS if on_time else settings.POLL_BATCH_MIN_WAIT_SECONDS
    return state != StepRun.State.WAITING or after < limit


# --- Run ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Result:
    """What one attempt came to; `outcome` None: the step was handed back unattempted."""

    attempt: Attempt
    outcome: registry.Outcome | errors.StepError | None
    #: The step's memory after the attempt (the function changes it in place).
    memo: dict[str, Any]
    #: When the attempt ran, and when the step's first attempt did.
    at: datetime.datetime
    started: datetime.datetime
    #: When the step's code returned (None: at `at`). A retry's backoff counts from here:
    #: counted from `at`, an attempt that ran longer than its backoff (a connect timeout)
    #: would be due again before its failure is even recorded.
    ended: datetime.datetime | None = None

    @property
    def repeats(self) -> bool:
        """A waiting step that polls again (or goes back unpolled): its own row only."""
        waiting = self.attempt.step.state == StepRun.State.WAITING
        return waiting and (self.outcome is None or isinstance(self.outcome, registry.Poll))


def run(attempt: Attempt, *, at: datetime.datetime | None = None) -> Result:
    """Call the step's function once, or time it out; never raises for the step's errors.

    No transaction is open (checked: invariant 8) and no row lock is held; the lease,
    extended by the heartbeat while the function runs, keeps other attempts away. `at`
    is the attempt's time (default now).
    """
    leases.no_transaction_open()
    step = attempt.step
    at = at or clock.now()
    started = step.started_at or at
    ctx = registry.StepContext.of(attempt.run, step)
    if step.timeout_seconds and at - started > datetime.timedelta(seconds=step.timeout_seconds):
        outcome: registry.Outcome | errors.StepError = errors.PermanentError(
            messages.step_timed_out(step.timeout_seconds)
        )
    else:
        with leases.heartbeat.hold([attempt.lease]):
            outcome = execute_once(ctx, observe.log_fields(attempt.run, step))
    return Result(
        attempt=attempt,
        outcome=outcome,
        memo=ctx.memo,
        at=at,
        started=started,
        ended=max(at, clock.now()),
    )


def hand_back(attempt: Attempt, *, at: datetime.datetime) -> Result:
    """The attempt is given up before it ran (a batch past half its lease): due at `at`."""
    memo = dict(attempt.step.memo)
    return Result(attempt=attempt, outcome=None, memo=memo, at=at, started=at)


def execute_once(
    ctx: registry.StepContext, fields: dict[str, Any]
) -> registry.Outcome | errors.StepError:
    """Run the step function once; any exception becomes a StepError, never escapes."""
    try:
        step_type = registry.get(ctx.step_type)
        return step_type.run(ctx)
    except errors.StepError as exc:
        return exc
    except Exception as exc:
        logger.exception(
            "step raised an unexpected error", extra={"action": "step_error", **fields}
        )
        return errors.TemporaryError(messages.step_unexpected_error(exc))


# --- Decide ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Decision:
    """What a result does to its step: the state it moves to and the columns it writes."""

    state: str
    fields: Mapping[str, Any]

    @property
    def finished(self) -> bool:
        return self.state in StepRun.FINISHED


def decide(result: Result) -> Decision:
    """The step's next state after `result`: a pure function (the retry policy included)."""
    step, outcome, at = result.attempt.step, result.outcome, result.at
    if result.repeats:
        return Decision(StepRun.State.WAITING, _poll_changes(result))
    common: dict[str, Any] = {"memo": result.memo, "started_at": result.started}
    if isinstance(outcome, registry.Done):
        return Decision(
            StepRun.State.SUCCEEDED, {**common, "output": dict(outcome.output), "message": ""}
        )
    if isinstance(outcome, registry.Poll):
        if outcome.output is not None:
            common["output"] = dict(outcome.output)
        return Decision(
            StepRun.State.WAITING,
            {
                **common,
                "due_at": _after(at, outcome.after),
                "message": messages.fit(outcome.message),
            },
        )
    if outcome is None:  # never: an unattempted step repeats (handed back), decided above
        raise ValueError(f"step {step.pk}: a result without an outcome moves nothing")
    failures = step.failures + 1
    common.update(failures=failures, message=messages.fit(outcome.message))
    if outcome.output is not None:
        common["output"] = dict(outcome.output)
    if isinstance(outcome, errors.TemporaryError) and failures <= step.retries:
        delay = outcome.delay if outcome.delay is not None else backoff(failures)
        failed_at = result.ended or at
        return Decision(StepRun.State.READY, {**common, "due_at": _after(failed_at, delay)})
    return Decision(StepRun.State.FAILED, common)


def _after(at: datetime.datetime, seconds: float) -> datetime.datetime:
    return at + datetime.timedelta(seconds=max(0.0, seconds))


def _poll_changes(result: Result) -> dict[str, Any]:
    """The columns a repeated poll changes: the next due time, and what differs from the row."""
    step, outcome, at = result.attempt.step, result.outcome, result.at
    if not isinstance(outcome, registry.Poll):  # handed back: due at once, nothing else
        return {"due_at": at}
    changes: dict[str, Any] = {"due_at": _after(at, outcome.after)}
    if result.memo != step.memo:
        changes["memo"] = result.memo
    message = messages.fit(outcome.message)
    if message != step.message:
        changes["message"] = message
    if outcome.output is not None and dict(outcome.output) != step.output:
        changes["output"] = dict(outcome.output)
    if step.started_at is None:
        changes["started_at"] = at
    return changes


# --- Record ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Recorded:
    """What `record` wrote: per result its decision, or None where the lease was lost."""

    decisions: list[Decision | None]
    #: With `claim_next`: the steps the success made due, claimed in the same statement
    #: (inline types only), or None when the run is not running (nothing was written).
    next: list[Attempt] | None = None


def record(results: Iterable[Result], *, claim_next: bool = False) -> Recorded:
    """Record each result by compare-and-set on its lease; None where the lease was lost.

    Repeated polls are written together in one statement, with an asynchronous commit
    (a crash may lose the last polls; the steps are then polled again, which steps allow)
    and without touching their runs. Any other result changes its step's state: call it
    inside the run's scheduling transaction, which holds the run's lock.

    `claim_next` is the fast path of a chain of steps, for one result that
    `can_claim_next`: one statement locks the run, records the success and claims the
    inline steps it makes due (see sql.SUCCEED_AND_CLAIM_NEXT); what it cannot decide
    alone (the run's end, a join of branches, other step types) is left to scheduling.
    """
    results = list(results)
    if claim_next:
        [result] = results
        return _succeed_and_claim_next(result)
    repeats = [r for r in results if r.repeats]
    written = _record_repeats(repeats)
    decisions: list[Decision | None] = []
    for result in results:
        if result.repeats:
            decisions.append(decide(result) if result.attempt.step.pk in written else None)
        else:
            decisions.append(_record_change(result))
    return Recorded(decisions)


def can_claim_next(result: Result) -> bool:
    """The one-statement path applies: the step succeeded (a routine move: no event) and
    others of its run remain. The last step's success ends the run: it is recorded in the
    scheduling transaction that finishes the run, not in a statement of its own first."""
    return (
        not result.repeats and isinstance(result.outcome, registry.Done) and not result.attempt.last
    )


def starts_waiting_alone(result: Result) -> bool:
    """A first poll that its run's answer does not show: the step's type declares no
    waiting message and waits for no person (see sql.RECORD_FIRST_POLL)."""
    step = result.attempt.step
    return (
        step.state == StepRun.State.READY
        and isinstance(result.outcome, registry.Poll)
        and not registry.waiting_message(step.type)
        and not registry.waits_for_person(step.type)
    )


def record_first_poll(result: Result) -> bool:
    """Record a first poll that `starts_waiting_alone` by its lease, its own row alone, when
    the run already names the step in its message; whether it was written. When it was
    not (the lease was lost, the run moved on or says something else), the caller records
    it in the run's scheduling transaction, which decides."""
    attempt = result.attempt
    step, lease = attempt.step, attempt.lease
    decision = decide(result)
    fields = decision.fields
    output = fields.get("output")
    params = {
        # As a repeated poll: were an inline step's commit lost, it would poll again.
        "commit": "off" if _inline(step.type) else "on",
        "id": step.pk,
        "token": lease.token,
        "owner": lease.owner,
        "due_at": fields["due_at"],
        "memo": json.dumps(fields["memo"]),
        "message": fields["message"],
        "output": json.dumps(output) if output is not None else None,
        "started_at": fields["started_at"],
        "run_message": messages.run_running_step(attempt.run.template_name, step.name),
    }
    if not sql.fetch(sql.RECORD_FIRST_POLL, params):
        return False
    for name, value in {**fields, "state": decision.state}.items():
        setattr(step, name, value)
    step.lease_owner, step.lease_expires_at = "", None
    _countdown(step.pk, decision.state, decision, result)
    return True


def _succeed_and_claim_next(result: Result) -> Recorded:
    attempt = result.attempt
    step, lease = attempt.step, attempt.lease
    decision = decide(result)
    fields = decision.fields
    seconds = settings.STEP_LEASE_SECONDS
    now = clock.now()
    params = {
        "run": attempt.run.pk,
        # An inline step has no side effects: were this commit lost, it would run again.
        "commit": "off" if _inline(step.type) else "on",
        "id": step.pk,
        "token": lease.token,
        "owner": lease.owner,
        "memo": json.dumps(fields["memo"]),
        "output": json.dumps(fields["output"]),
        "started_at": fields["started_at"],
        "finished_at": now,
        "now": now,
        "expires": now + datetime.timedelta(seconds=seconds),
        "inline": registry.inline_names(),
    }
    names = ["recorded", *sql.CLAIM_COLUMNS]
    rows = sql.rows(sql.SUCCEED_AND_CLAIM_NEXT, params, names)
    if not rows:
        return Recorded([None], next=None)  # the run is not running: scheduling decides
    if not rows[0]["recorded"]:
        _dropped(result)
        return Recorded([None], next=[])
    for name, value in {**fields, "state": decision.state, "finished_at": now}.items():
        setattr(step, name, value)
    step.due_at, step.lease_owner, step.lease_expires_at = None, "", None
    logger.info(
        "step succeeded",
        extra={"action": "step_succeeded", **observe.log_fields(attempt.run, step)},
    )
    _observe(result, failed=False)
    claimed = [
        claims.attempt_of(row, owner=lease.owner, seconds=seconds, expires=params["expires"])
        for row in rows
        if row["id"] is not None
    ]
    return Recorded([decision], next=claimed)


def _inline(type_name: str) -> bool:
    step_type = registry.find(type_name)
    return step_type is not None and step_type.inline


def _record_repeats(results: Sequence[Result]) -> set[int]:
    if not results:
        return set()
    decisions = {r.attempt.step.pk: decide(r) for r in results}
    columns: dict[str, list[Any]] = {name: [] for name in sql.RECORD_REPEAT_ARRAYS}
    for result in results:
        fields = decisions[result.attempt.step.pk].fields
        columns["id"].append(result.attempt.step.pk)
        columns["claims"].append(result.attempt.lease.token)
        for name in sql.RECORD_REPEAT_ARRAYS[2:]:
            value = fields.get(name)
            columns[name].append(
                json.dumps(value) if name in ("memo", "output") and value is not None else value
            )
    owner = results[0].attempt.lease.owner
    with transaction.atomic():
        sql.execute(sql.ASYNCHRONOUS_COMMIT)
        written = {
            row["id"] for row in sql.rows(sql.RECORD_REPEATS, [*columns.values(), owner], ["id"])
        }
        for result in results:
            step = result.attempt.step
            if step.pk not in written:
                _dropped(result)
                continue
            if result.outcome is not None:
                _countdown(step.pk, StepRun.State.WAITING, decisions[step.pk], result)
    return written


def _record_change(result: Result) -> Decision | None:
    """Move the step as `decide` says, by its lease; its run's lock is held by the caller."""
    attempt = result.attempt
    step, run = attempt.step, attempt.run
    decision = decide(result)
    fields = observe.log_fields(run, step)
    retried = decision.state == StepRun.State.READY
    try:
        transitions.step_move(
            step,
            decision.state,
            allowed_from=StepRun.DUE,
            lease=attempt.lease,
            # A retry is recorded below, with its attempt and next time.
            record=False if retried else None,
            **decision.fields,
        )
    except transitions.LeaseLost:
        _dropped(result)
        return None
    if retried:
        transitions.retry_record(step, error=step.message, next_at=decision.fields["due_at"])
    if decision.state == StepRun.State.SUCCEEDED:
        logger.info("step succeeded", extra={"action": "step_succeeded", **fields})
        _observe(result, failed=False)
    elif decision.state == StepRun.State.FAILED:
        logger.warning(
            "step failed", extra={"action": "step_failed", "error": step.message, **fields}
        )
        _observe(result, failed=True)
        cleanups.after_stop([step])
    elif decision.state == StepRun.State.READY:
        logger.warning(
            "step will be retried", extra={"action": "step_retry", "error": step.message, **fields}
        )
    if decision.state in StepRun.DUE:
        _countdown(step.pk, decision.state, decision, result)
    return decision


def _countdown(step_id: int, state: str, decision: Decision, result: Result) -> None:
    """A step due again soon gets its countdown message (after commit); a long wait not.
    Soon is judged from the attempt's time, as asked; the countdown is what is left now."""
    due_at = decision.fields["due_at"]
    on_time = isinstance(result.outcome, registry.Poll) and result.outcome.on_time
    if needs_countdown(state, (due_at - result.at).total_seconds(), on_time=on_time):
        dispatch.poll_step(step_id, max(0.0, (due_at - clock.now()).total_seconds()))


def _dropped(result: Result) -> None:
    """The lease was lost: the outcome is not written. If an operator (or the deadline)
    cancelled the step meanwhile, this late attempt may have made something after the
    cancel's cleanup ran: clean up once more."""
    attempt = result.attempt
    current = StepRun.objects.filter(pk=attempt.step.pk).values_list("state", flat=True).first()
    logger.warning(
        "step outcome dropped: the attempt lost its lease",
        extra={
            "action": "step_outcome_dropped",
            "claim": attempt.lease.token,
            "state": current,
            **observe.log_fields(attempt.run, attempt.step),
        },
    )
    if current == StepRun.State.CANCELLED:
        step = attempt.step
        step.started_at = result.started  # it ran, whatever the row says
        cleanups.after_stop([step])


def _observe(result: Result, *, failed: bool) -> None:
    """Count a finished step once its transaction commits: a rolled-back one did not finish."""
    seconds = (result.at - result.started).total_seconds()
    observe.emit(
        observe.StepFinished(step_type=result.attempt.step.type, seconds=seconds, failed=failed)
    )
