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
dropped and logged, never written. `decide` (workflows.engine.policy, a pure function)
says what a result does to its step: the error budget, the timeouts.

A call of a step's function is bounded (`run`): an inline type's runs here and returns at
once; any other's runs on a step thread (workflows.engine.calls), and the attempt waits for
it at most until the earlier of the step's deadline (its first attempt plus timeoutSeconds)
and the call's bound (its type's call_timeout_seconds). At the deadline the step fails for
good ("timed out after N s", its cleanup runs); at the call's bound before it, the attempt
is a temporary error that the error budget judges. Either way the attempt returns then.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from workflows import clock, errors
from workflows.engine import (
    calls,
    claims,
    cleanups,
    dispatch,
    leases,
    messages,
    observe,
    sql,
    stepstate,
    transitions,
)
from workflows.engine.claims import Attempt, claim
from workflows.engine.policy import Decision, Result, backoff, decide, needs_countdown
from workflows.models import Run, StepRun
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


# --- Run ------------------------------------------------------------------------------------


def run(attempt: Attempt, *, at: datetime.datetime | None = None) -> Result:
    """Call the step's function once, bounded (see the module's docstring); never raises for
    the step's errors.

    No transaction is open (checked: invariant 8) and no row lock is held; the lease keeps
    other attempts away. `at` is the attempt's time (default now).
    """
    leases.no_transaction_open()
    step = attempt.step
    at = at or clock.now()
    started = step.started_at or at
    ctx = registry.StepContext.of(attempt.run, step)
    ctx.now = at
    deadline = (
        started + datetime.timedelta(seconds=step.timeout_seconds) if step.timeout_seconds else None
    )
    step_type = registry.find(step.type)
    memo = ctx.memo
    outcome: registry.Outcome | errors.StepError
    if deadline is not None and at >= deadline:
        outcome = errors.PermanentError(messages.step_timed_out(step.timeout_seconds or 0))
    elif step_type is None or step_type.inline:
        # No I/O (or an unknown type, which fails at once): it returns here and now.
        outcome = execute_once(ctx, observe.log_fields(attempt.run, step))
    else:
        with leases.heartbeat.hold([attempt.lease]):
            outcome, memo = _bounded(ctx, attempt, step_type, at=at, deadline=deadline)
    return Result(
        attempt=attempt,
        outcome=outcome,
        memo=memo,
        at=at,
        started=started,
        ended=max(at, clock.now()),
    )


def _bounded(
    ctx: registry.StepContext,
    attempt: Attempt,
    step_type: registry.StepType,
    *,
    at: datetime.datetime,
    deadline: datetime.datetime | None,
) -> tuple[registry.Outcome | errors.StepError, dict[str, Any]]:
    """The step's function on a step thread, waited for until its bound: its outcome and the
    memo to record (as the call left it when it was abandoned: what it made is cleaned up)."""
    step = attempt.step
    # A step made before calls were bounded has no bound of its own: its type's.
    bound = float(step.call_timeout_seconds or step_type.call_timeout_seconds or 0)
    timeout = step.timeout_seconds or 0
    at_deadline = deadline is not None and (deadline - at).total_seconds() <= bound
    if deadline is not None and at_deadline:
        bound = (deadline - at).total_seconds()
    fields = observe.log_fields(attempt.run, step)
    outcome = calls.call(functools.partial(execute_once, ctx, fields), seconds=bound)
    if outcome is not calls.TIMED_OUT:
        return outcome, ctx.memo
    logger.warning(
        "step call did not return within its bound",
        extra={"action": "step_call_timeout", "seconds": round(bound, 3), **fields},
    )
    memo = _snapshot(ctx.memo, dict(step.memo))
    if at_deadline:
        return errors.PermanentError(messages.step_timed_out(timeout)), memo
    return errors.TemporaryError(messages.step_call_timed_out(int(bound))), memo


def _snapshot(memo: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """A copy of a memo that an abandoned call may still change; `before` if it cannot be
    copied (it changed as it was read)."""
    try:
        copied: dict[str, Any] = json.loads(json.dumps(memo))
    except (RuntimeError, TypeError, ValueError):
        return before
    return copied


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
    inline steps it makes due (see stepstate.SUCCEED_AND_CLAIM_NEXT); what it cannot decide
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
    waiting message and waits for no person (see stepstate.RECORD_FIRST_POLL)."""
    step = result.attempt.step
    return (
        step.state == StepRun.State.READY
        and isinstance(result.outcome, registry.Poll)
        and not registry.waiting_message(step.type)
        and not registry.waits_for_person(step.type)
        and not registry.says_own_wait(step.type)
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
    if not stepstate.record_first_poll(params):
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
    rows = stepstate.succeed_and_claim_next(params)
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
    columns: dict[str, list[Any]] = {name: [] for name in stepstate.RECORD_REPEAT_ARRAYS}
    for result in results:
        fields = decisions[result.attempt.step.pk].fields
        columns["id"].append(result.attempt.step.pk)
        columns["claims"].append(result.attempt.lease.token)
        for name in stepstate.RECORD_REPEAT_ARRAYS[2:]:
            value = fields.get(name)
            columns[name].append(
                json.dumps(value) if name in ("memo", "output") and value is not None else value
            )
    owner = results[0].attempt.lease.owner
    with transaction.atomic():
        sql.execute(sql.ASYNCHRONOUS_COMMIT)
        written = stepstate.record_repeats(columns, owner)
        for result in results:
            step = result.attempt.step
            if step.pk not in written:
                _dropped(result)
                continue
            if result.outcome is not None:
                _countdown(step.pk, StepRun.State.WAITING, decisions[step.pk], result)
    _retell([r for r in results if r.attempt.step.pk in written])
    return written


def _retell(results: Sequence[Result]) -> None:
    """A waiting step that says its own wait and now says something else (a gate that
    halts): its run's message follows, by compare-and-set on the message the step gave it,
    in its own statement after the steps' commit (the run's lock comes before its steps')."""
    for result in results:
        step, run, outcome = result.attempt.step, result.attempt.run, result.outcome
        if not isinstance(outcome, registry.Poll) or not registry.says_own_wait(step.type):
            continue
        said = messages.fit(outcome.message)
        if said == step.message:
            continue
        name = run.template_name
        Run.objects.filter(
            pk=run.pk,
            state=Run.State.RUNNING,
            message=messages.run_waits(name, step.message, step.name),
        ).update(message=messages.run_waits(name, said, step.name))


def _record_change(result: Result) -> Decision | None:
    """Move the step as `decide` says, by its lease; its run's lock is held by the caller."""
    attempt = result.attempt
    step, run = attempt.step, attempt.run
    decision = decide(result)
    fields = observe.log_fields(run, step)
    retried = decision.state == StepRun.State.READY
    try:
        stepstate.move(
            step,
            decision.state,
            allowed_from=StepRun.DUE,
            lease=attempt.lease,
            # A retry is recorded below, with its attempt and next time.
            record=False if retried else None,
            **decision.fields,
        )
    except stepstate.LeaseLost:
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
