"""Every state change of runs and steps, as compare-and-set updates that also write the audit trail.

`run_move` and `step_move` update a row only if it is still in one of the states the
caller expected, and record a RunEvent in the same transaction. When the row has moved
on (another worker, an operator), they raise `InvalidTransition` and change nothing.
An attempt records its outcome with its lease (workflows.engine.leases): the row must
still carry the lease's token and owner, else `LeaseLost`. Every move of a step ends any
lease on it, so an attempt that was running meanwhile finds its lease lost.

A step's routine progress (promoted, started waiting, succeeded) is recorded by its own
StepRun row (state, started and finished times), so it writes no RunEvent: the history
keeps run transitions, a step's failures, retries, skips and cancellations, and every
operator action.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from workflows import clock
from workflows.engine import leases, messages
from workflows.models import Run, RunEvent, StepRun


class InvalidTransition(Exception):
    """The row was not in a state the transition starts from."""


class LeaseLost(InvalidTransition):
    """The step no longer carries the attempt's lease: it passed and was claimed again, or
    someone else (an operator, the deadline) moved the step on."""


#: What ends a lease: every move of a step writes these.
LEASE_FREE = {"lease_owner": "", "lease_expires_at": None}


_S = StepRun.State
#: Step transitions the StepRun row records well enough on its own (see the docstring).
ROUTINE_STEP_MOVES = frozenset(
    {
        (_S.PENDING, _S.READY),
        (_S.READY, _S.WAITING),
        (_S.READY, _S.SUCCEEDED),
        (_S.WAITING, _S.SUCCEEDED),
    }
)


def run_move(
    run: Run,
    to: str,
    *,
    allowed_from: Iterable[str],
    message: str | None = None,
    actor: str = "",
    reason: str = "",
    **fields: Any,
) -> None:
    """Move `run` to state `to`; update `fields` too; record the transition."""
    allowed = list(allowed_from)
    now = clock.now()
    changes: dict[str, Any] = {"state": to, **fields}
    if message is not None:
        changes["message"] = message
    if to in Run.FINISHED:
        changes.setdefault("finished_at", now)
        changes.setdefault("wake_at", None)
    updated = Run.objects.filter(pk=run.pk, state__in=allowed).update(**changes)
    if not updated:
        raise InvalidTransition(f"run {run.pk} is not in {allowed}")
    previous = run.state
    for key, value in changes.items():
        setattr(run, key, value)
    if previous != to:
        RunEvent.objects.create(
            run=run,
            kind=RunEvent.Kind.TRANSITION,
            name=f"{previous}->{to}",
            actor=actor,
            reason=reason,
            message=run.message,
        )


def step_move(
    step: StepRun,
    to: str,
    *,
    allowed_from: Iterable[str],
    record: bool | None = None,
    actor: str = "",
    reason: str = "",
    lease: leases.Lease | None = None,
    **fields: Any,
) -> None:
    """Move `step` to state `to`; update `fields` too; record the transition; end any lease.

    `record` None records it unless it is routine (ROUTINE_STEP_MOVES, no actor). With
    `lease`, only an attempt holding that lease may move it (else LeaseLost).
    """
    allowed = list(allowed_from)
    changes: dict[str, Any] = {"state": to, **fields, **LEASE_FREE}
    if to in StepRun.FINISHED:
        changes.setdefault("finished_at", clock.now())
        changes.setdefault("due_at", None)
    rows = StepRun.objects.filter(pk=step.pk, state__in=allowed)
    if lease is not None:
        rows = rows.filter(claims=lease.token, lease_owner=lease.owner)
    if not rows.update(**changes):
        if lease is not None:
            raise LeaseLost(f"step {step.pk} no longer carries claim {lease.token}")
        raise InvalidTransition(f"step {step.pk} is not in {allowed}")
    previous = step.state
    for key, value in changes.items():
        setattr(step, key, value)
    if record is None:
        record = bool(actor) or (previous, to) not in ROUTINE_STEP_MOVES
    if record and previous != to:
        RunEvent.objects.create(
            run_id=step.run_id,
            step_name=step.name,
            kind=RunEvent.Kind.TRANSITION,
            name=f"{previous}->{to}",
            actor=actor,
            reason=reason,
            message=step.message,
        )


#: The RunEvent of a failed attempt that the engine retries (kind transition, no actor).
RETRY = "retry"


def retry_record(step: StepRun, *, error: str, next_at: datetime.datetime) -> RunEvent:
    """Record that attempt `step.failures` (of the streak since the step last made progress)
    failed with `error` and the next is at `next_at`.

    A retried step often stays `ready` (ready, failed, ready again), a move that writes no
    transition: this event is what keeps each failed attempt in the run's history.
    """
    attempts = step.retries + 1
    return RunEvent.objects.create(
        run_id=step.run_id,
        step_name=step.name,
        kind=RunEvent.Kind.TRANSITION,
        name=RETRY,
        message=messages.step_retrying(
            step.failures, attempts, error, next_at, retry_for=step.retry_for_seconds
        ),
        details={
            "attempt": step.failures,
            "attempts": attempts,
            "error": error,
            "nextAt": next_at.isoformat(),
        },
    )


def action_record(
    run: Run, action: str, *, actor: str, reason: str, step_name: str = "", message: str = ""
) -> RunEvent:
    """Record an operator action (who, why) on `run`."""
    return RunEvent.objects.create(
        run=run,
        step_name=step_name,
        kind=RunEvent.Kind.ACTION,
        name=action,
        actor=actor,
        reason=reason,
        message=message,
    )
