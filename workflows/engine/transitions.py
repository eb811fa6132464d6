"""A run's state changes and the audit trail (RunEvent) of runs and steps.

`run_move` updates a run only if it is still in one of the states the caller expected, and
records a RunEvent in the same transaction; when the row has moved on (another worker, an
operator), it raises `InvalidTransition` and changes nothing. A step's moves are decided by
workflows.engine.lifecycle and written by workflows.engine.stepstate; `retry_record` and
`action_record` keep a step's retries and operators' actions in the history.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from workflows import clock
from workflows.engine import messages
from workflows.models import Run, RunEvent, StepRun


class InvalidTransition(Exception):
    """The row was not in a state the transition starts from."""


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
