"""One way to attempt a step: claim it by lease, run its code with no transaction open, record.

`claim` (workflows.engine.claims) leases due steps in one compare-and-set UPDATE and commits
with the caller's transaction, or at once. `run` calls the step's function once, with no
transaction open and no row lock held (checked), bounded: an inline type's runs here and
returns at once; any other's runs on a step thread (workflows.engine.calls), and the attempt
waits for it at most until the earlier of the step's deadline and its call's bound. What
the attempt comes to is a `writes.Result`; what that does to the step is
`lifecycle.after`'s Write, applied by stepstate on the path `lifecycle.route` picks:
`record_repeats` (repeated polls, many in one statement), `record_fast` (a first poll on its
own row, or a success with the claim of what it makes due), `record_scheduled` (anything
else, inside the run's scheduling transaction, which holds the run's lock). An outcome
whose lease was lost (it passed and the step was claimed again, or an operator moved the
step) is dropped and logged, never written.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import logging
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from workflows import clock, errors
from workflows.engine import (
    calls,
    claims,
    dispatch,
    leases,
    lifecycle,
    messages,
    observe,
    stepstate,
    writes,
)
from workflows.engine.claims import Attempt, claim
from workflows.models import StepRun
from workflows.steps import registry

__all__ = [
    "Attempt",
    "Fast",
    "Tried",
    "claim",
    "execute_once",
    "hand_back",
    "record_fast",
    "record_repeats",
    "record_scheduled",
    "run",
    "tried",
]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Tried:
    """An attempt and what it came to."""

    attempt: Attempt
    result: writes.Result

    @property
    def repeats(self) -> bool:
        return self.result.repeats


# --- Run ------------------------------------------------------------------------------------


def run(attempt: Attempt, *, at: datetime.datetime | None = None) -> Tried:
    """Call the step's function once, bounded; never raises for the step's errors.

    No transaction is open (checked: invariant 8) and no row lock is held; the lease keeps
    other attempts away. `at` is the attempt's time (default now).
    """
    leases.no_transaction_open()
    step = attempt.step
    at = at or clock.now()
    ctx = registry.StepContext.of(attempt.run, step)
    ctx.now = at
    memo = ctx.memo
    outcome: registry.Outcome | errors.StepError
    stopped = lifecycle.before_call(step, at)
    if stopped is not None:
        outcome = stopped
    elif not lifecycle.inline(step.type) and registry.find(step.type) is not None:
        with leases.heartbeat.hold([attempt.lease]):
            outcome, memo = _bounded(ctx, attempt, at=at)
    else:  # no I/O (or an unknown type, which fails at once): it returns here and now
        outcome = execute_once(ctx, observe.log_fields(attempt.run, step))
    return tried(attempt, outcome, memo, at=at, ended=max(at, clock.now()))


def tried(
    attempt: Attempt,
    outcome: registry.Outcome | errors.StepError | None,
    memo: dict[str, Any],
    *,
    at: datetime.datetime,
    ended: datetime.datetime | None = None,
) -> Tried:
    """What `attempt` came to: `outcome` (None: handed back), at `at`."""
    step = attempt.step
    result = writes.Result(
        step=step,
        run_name=attempt.run.template_name,
        outcome=outcome,
        memo=memo,
        at=at,
        # A claim starts the step's clock; a row claimed by an older release may not have it.
        started=step.started_at or at,
        ended=ended,
        last=attempt.last,
    )
    return Tried(attempt, result)


def _bounded(
    ctx: registry.StepContext, attempt: Attempt, *, at: datetime.datetime
) -> tuple[registry.Outcome | errors.StepError, dict[str, Any]]:
    """The step's function on a step thread, waited for until its bound: its outcome and the
    memo to record (as the call left it when it was abandoned: what it made is cleaned up)."""
    step = attempt.step
    seconds, at_deadline = lifecycle.call_seconds(step, at)
    fields = observe.log_fields(attempt.run, step)
    outcome = calls.call(functools.partial(execute_once, ctx, fields), seconds=seconds)
    if outcome is not calls.TIMED_OUT:
        return outcome, ctx.memo
    logger.warning(
        "step call did not return within its bound",
        extra={"action": "step_call_timeout", "seconds": round(seconds, 3), **fields},
    )
    memo = _snapshot(ctx.memo, dict(step.memo))
    return lifecycle.timed_out(step, at_deadline=at_deadline, seconds=seconds), memo


def _snapshot(memo: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """A copy of a memo that an abandoned call may still change; `before` if it cannot be
    copied (it changed as it was read)."""
    try:
        copied: dict[str, Any] = json.loads(json.dumps(memo))
    except (RuntimeError, TypeError, ValueError):
        return before
    return copied


def hand_back(attempt: Attempt, *, at: datetime.datetime) -> Tried:
    """The attempt is given up before it ran (a batch past half its lease): due at `at`."""
    return tried(attempt, None, dict(attempt.step.memo), at=at)


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


def record_repeats(tried: Sequence[Tried]) -> set[int]:
    """Record repeated polls (writes.Path.REPEAT) of one process in one statement, by
    lease; the ids written (the others' leases were lost: dropped)."""
    items = [(t.attempt.step, lifecycle.after(t.result), t.attempt.lease) for t in tried]
    written = stepstate.apply_repeats(items)
    for each in tried:
        if each.attempt.step.pk not in written:
            _dropped(each)
    return written


@dataclasses.dataclass(frozen=True)
class Fast:
    """What a fast path did: the steps a chain claimed next, and whether the run's
    scheduling should look at the run now (a chain that claimed nothing, or lost its lease);
    the run's row when the success ended the run (Path.FINISH: what follows a run's end is
    scheduling's)."""

    claimed: list[Attempt]
    settle: bool
    finished: dict[str, Any] | None = None


def record_fast(tried: Tried) -> Fast | None:
    """Record `tried` on its fast path (lifecycle.route: a first poll on its own row, a
    success that claims what it makes due, or one that ends its run); None when it goes
    through its run's scheduling."""
    attempt, result = tried.attempt, tried.result
    write = lifecycle.after(result)
    route = lifecycle.route(write, result)
    step, lease = attempt.step, attempt.lease
    if route.path is writes.Path.ALONE:
        if not stepstate.apply_alone(step, write, lease=lease, route=route):
            return None  # the run says something else, or the lease was lost: scheduling decides
        return Fast(claimed=[], settle=False)
    now = clock.now()
    if route.path is writes.Path.FINISH:
        finished = stepstate.apply_finish(
            step, write, lease=lease, route=route, run_id=attempt.run.pk, now=now
        )
        if finished is None:
            return None  # the lease was lost, or the run must be looked at: scheduling decides
        _told(tried, write)
        return Fast(claimed=[], settle=False, finished=finished)
    if route.path is not writes.Path.CHAIN:
        return None
    ahead = _run_ahead(tried)
    now = clock.now()
    seconds = settings.STEP_LEASE_SECONDS
    expires = now + datetime.timedelta(seconds=seconds)
    chained = stepstate.apply_chain(
        step,
        write,
        lease=lease,
        route=route,
        run_id=attempt.run.pk,
        now=now,
        expires=expires,
        ahead=[(each, each_write, seen) for each, each_write, seen, _ in ahead],
    )
    if chained is None:
        return None  # the run is not running: its scheduling decides
    if not chained.recorded:
        _dropped(tried)
        return Fast(claimed=[], settle=True)
    _told(tried, write)
    if chained.ran:
        for each, each_write, _, each_result in ahead:
            _tell(attempt.run, each, each_result, each_write)
    left = chained.left if len(chained.claimed) == 1 else []
    claimed = [
        claims.attempt_of(row, owner=lease.owner, seconds=seconds, left=left)
        for row in chained.claimed
    ]
    return Fast(claimed=claimed, settle=not claimed)


#: A step run ahead of its claim: the step, its Write, the memo its code saw, its Result.
Ahead = tuple[StepRun, writes.Write, dict[str, Any], writes.Result]


def _run_ahead(tried: Tried) -> list[Ahead]:
    """The pending steps of the run that the success of `tried` lets its chain run ahead of
    their claim (lifecycle.may_run_ahead, in their order, each once), and whose outcome is a
    success (lifecycle.ahead): the chain's statement records them with it. One pending step
    at least is left (the run's end is the claim's, Path.FINISH); what is not done here is
    claimed and run in its turn."""
    attempt = tried.attempt
    if not attempt.left:
        return []
    leases.no_transaction_open()
    run = attempt.run
    pending = {row["name"]: row for row in attempt.left}
    done = {attempt.step.name}
    ran: list[Ahead] = []
    looked: set[str] = set()
    progress = True
    while progress:
        progress = False
        for name, row in pending.items():
            if name in looked:
                continue
            step = claims.step_of(row, run)
            if not lifecycle.may_run_ahead(step, done=done, pending=set(pending) - done):
                continue
            looked.add(name)
            at = clock.now()
            ctx = registry.StepContext.of(run, step)
            ctx.now = at
            seen = dict(step.memo)
            stopped = lifecycle.before_call(step, at)
            outcome = stopped or execute_once(ctx, observe.log_fields(run, step))
            result = writes.Result(
                step=step,
                run_name=run.template_name,
                outcome=outcome,
                memo=ctx.memo,
                at=at,
                started=step.started_at or at,
                ended=max(at, clock.now()),
            )
            write = lifecycle.ahead(result)
            if write is None:
                continue
            done.add(name)
            ran.append((step, write, seen, result))
            progress = True
    return ran


def record_scheduled(tried: Tried, *, run: Any) -> writes.Write | None:
    """Record `tried` by its lease inside its run's scheduling transaction (the caller holds
    the run's lock): the Write applied, or None when the lease was lost (dropped)."""
    attempt = tried.attempt
    write = lifecycle.after(tried.result)
    try:
        stepstate.apply(attempt.step, write, lease=attempt.lease, run=run)
    except stepstate.LeaseLost:
        _dropped(tried)
        return None
    _told(tried, write)
    return write


def _told(tried: Tried, write: writes.Write) -> None:
    """The log line and the metric of a recorded outcome that moved its step."""
    _tell(tried.attempt.run, tried.attempt.step, tried.result, write)


def _tell(run: Any, step: StepRun, result: writes.Result, write: writes.Write) -> None:
    fields = observe.log_fields(run, step)
    if write.to == StepRun.State.SUCCEEDED:
        logger.info("step succeeded", extra={"action": "step_succeeded", **fields})
    elif write.to == StepRun.State.FAILED:
        extra = {"action": "step_failed", "error": step.message, **fields}
        logger.warning("step failed", extra=extra)
    elif write.to == StepRun.State.READY:
        extra = {"action": "step_retry", "error": step.message, **fields}
        logger.warning("step will be retried", extra=extra)
    if write.finished:
        seconds = (result.at - result.started).total_seconds()
        failed = write.to == StepRun.State.FAILED
        observe.emit(observe.StepFinished(step_type=step.type, seconds=seconds, failed=failed))


def _dropped(tried: Tried) -> None:
    """The lease was lost: the outcome is not written (and may have to be cleaned up)."""
    attempt = tried.attempt
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
    if lifecycle.dropped(current, attempt.step):
        dispatch.step_cleanups([attempt.step.pk])
