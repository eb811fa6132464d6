"""Operator actions on runs: retry, cancel, approve, skip, release, each recorded with who and why.

The CLI (`manage.py workflows ...`) and the admin call these; they never save models
directly. Each action locks the run, checks it applies, changes state through
`transitions`, records a RunEvent, and wakes the engine after commit. Once it commits, it
writes a log line (`action: operator_action`) with the operator, the run and the reason.
"""

from __future__ import annotations

import datetime
import logging

from django.db import transaction
from django.db.models import QuerySet

from workflows.definitions import typed
from workflows.engine import cleanups, clock, dispatch, messages, observe, transitions
from workflows.models import Run, StepRun
from workflows.steps import memo as memo_keys
from workflows.steps import registry

logger = logging.getLogger(__name__)


class ActionError(Exception):
    """The action does not apply to the run or step in its current state."""


def _lock_run(run_id: int) -> Run:
    run = Run.objects.select_for_update().filter(pk=run_id).first()
    if run is None:
        raise ActionError(f"run {run_id} does not exist")
    return run


def _lock_steps(steps: QuerySet[StepRun]) -> list[StepRun]:
    """Lock these steps of a run whose row is locked, in id order, as the engine does.

    No step's code runs under a lock (an attempt holds its step by lease only), so this
    waits at most for another short transaction. Moving a step ends the lease of an
    attempt that is running meanwhile: its outcome is dropped (workflows.engine.attempts).
    """
    return list(steps.select_for_update().order_by("id"))


def _step(run: Run, step_name: str) -> StepRun:
    found = _lock_steps(run.steps.filter(name=step_name))
    if not found:
        names = ", ".join(run.steps.values_list("name", flat=True)) or "none yet"
        raise ActionError(f"run {run.pk} has no step {step_name!r} (steps: {names})")
    return found[0]


def _due_now(run: Run) -> None:
    """The run must be scheduled: if the wake-up message is lost, the reconciler sends it."""
    Run.objects.filter(pk=run.pk).update(wake_at=clock.now())


def _record(run: Run, action: str, *, actor: str, reason: str, step_name: str = "") -> None:
    """Record the action in the run's history, and in the log once it commits."""
    transitions.action_record(run, action, actor=actor, reason=reason, step_name=step_name)
    fields = {
        **observe.log_fields(run),
        "action": "operator_action",
        "operation": action,
        "actor": actor,
        "reason": reason,
    }
    if step_name:
        fields["step"] = step_name
    message = f"operator {actor} did {action} on run {run.pk}"
    transaction.on_commit(lambda: logger.info(message, extra=fields))


def _require_actor(actor: str, reason: str) -> None:
    if not actor.strip():
        raise ActionError("an action needs the operator's name")
    if not reason.strip():
        raise ActionError("an action needs a reason")


def _resume(run: Run, *, actor: str, reason: str) -> None:
    """A finished run goes on running: after a retry, or a skip of what stopped it.

    A deadline restarts from the resumption: the operator gives the run its full time
    again (an old, passed deadline would fail or hold it at once).
    """
    seconds = typed.of(run.spec).deadline_seconds
    transitions.run_move(
        run,
        Run.State.RUNNING,
        allowed_from=[run.state],
        message=messages.run_running(run.template_name),
        finished_at=None,
        deadline_exceeded=False,
        deadline_at=clock.now() + datetime.timedelta(seconds=seconds) if seconds else None,
        actor=actor,
        reason=reason,
    )


def run_retry(*, run_id: int, actor: str, reason: str, step_name: str = "") -> Run:
    """Run a failed or cancelled step (or all of them) again from the start."""
    _require_actor(actor, reason)
    with transaction.atomic():
        run = _lock_run(run_id)
        retryable = [StepRun.State.FAILED, StepRun.State.CANCELLED]
        steps = (
            [_step(run, step_name)]
            if step_name
            else _lock_steps(run.steps.filter(state__in=retryable))
        )
        if not steps or any(s.state not in retryable for s in steps):
            what = f"step {step_name!r}" if step_name else "any step"
            raise ActionError(f"run {run.pk}: {what} is not failed or cancelled")
        for step in steps:
            # A new generation: what the step creates gets new names, so the failed
            # attempt's objects are not mistaken for the retry's.
            generation = int(step.memo.get(memo_keys.GENERATION, 0)) + 1
            memo = {memo_keys.GENERATION: generation}
            transitions.step_move(
                step,
                StepRun.State.PENDING,
                allowed_from=retryable,
                failures=0,
                message="",
                memo=memo,
                due_at=None,
                finished_at=None,
                started_at=None,
                actor=actor,
                reason=reason,
            )
        # Steps that were cancelled with the run go back to waiting for their turn too.
        for step in run.steps.filter(state=StepRun.State.CANCELLED):
            transitions.step_move(
                step, StepRun.State.PENDING, allowed_from=retryable, record=False, finished_at=None
            )
        if run.state in (Run.State.FAILED, Run.State.CANCELLED):
            _resume(run, actor=actor, reason=reason)
        _record(run, "retry", actor=actor, reason=reason, step_name=step_name)
        _due_now(run)
        dispatch.advance([run.pk])
    return run


def run_cancel(*, run_id: int, actor: str, reason: str) -> Run:
    """Stop a run and its unfinished steps; the lifecycle keeps holding unless released."""
    _require_actor(actor, reason)
    with transaction.atomic():
        run = _lock_run(run_id)
        if run.is_finished:
            raise ActionError(f"run {run.pk} is already {run.state}")
        unfinished = _lock_steps(run.steps.exclude(state__in=StepRun.FINISHED))
        for step in unfinished:
            transitions.step_move(
                step, StepRun.State.CANCELLED, allowed_from=[step.state], record=False
            )
        # What the started steps created (a conformance Namespace, ...) is deleted after commit.
        cleanups.after_stop(unfinished)
        transitions.run_move(
            run,
            Run.State.CANCELLED,
            allowed_from=Run.ACTIVE,
            message=messages.run_cancelled(run.pk, run.template_name),
            actor=actor,
            reason=reason,
        )
        _record(run, "cancel", actor=actor, reason=reason)
    return run


def step_approve(*, run_id: int, step_name: str, actor: str, reason: str) -> Run:
    """Approve a step that waits for a person: it succeeds the next time it runs, which is now."""
    _require_actor(actor, reason)
    with transaction.atomic():
        run = _lock_run(run_id)
        step = _step(run, step_name)
        if not registry.waits_for_person(step.type):
            raise ActionError(f"step {step_name!r} is a {step.type} step, not an approval")
        if step.state in StepRun.FINISHED:
            raise ActionError(f"step {step_name!r} is already {step.state}")
        memo = {**step.memo, memo_keys.APPROVED_BY: actor, memo_keys.APPROVAL_REASON: reason}
        due = step.due_at if step.state == StepRun.State.PENDING else clock.now()
        # Ends the lease of an attempt polling it now, whose outcome ("no approval yet")
        # is then dropped rather than written over the approval.
        StepRun.objects.filter(pk=step.pk).update(memo=memo, due_at=due, **transitions.LEASE_FREE)
        _record(run, "approve", actor=actor, reason=reason, step_name=step_name)
        dispatch.run_steps([step.pk])
    return run


def step_skip(*, run_id: int, step_name: str, actor: str, reason: str) -> Run:
    """Mark a step skipped: its dependents go on as if it had succeeded."""
    _require_actor(actor, reason)
    with transaction.atomic():
        run = _lock_run(run_id)
        step = _step(run, step_name)
        if step.state in StepRun.DONE:
            raise ActionError(f"step {step_name!r} is already {step.state}")
        transitions.step_move(
            step,
            StepRun.State.SKIPPED,
            allowed_from=[step.state],
            message=messages.STEP_SKIPPED,
            actor=actor,
            reason=reason,
        )
        if (
            run.state in (Run.State.FAILED, Run.State.CANCELLED)
            and not run.steps.filter(state__in=[StepRun.State.FAILED]).exists()
        ):
            _resume(run, actor=actor, reason=reason)
        _record(run, "skip", actor=actor, reason=reason, step_name=step_name)
        _due_now(run)
        dispatch.advance([run.pk])
    return run


def run_release(*, run_id: int, actor: str, reason: str) -> Run:
    """Let the lifecycle proceed whatever the run's state; the run itself is left as it is."""
    _require_actor(actor, reason)
    with transaction.atomic():
        run = _lock_run(run_id)
        if run.released:
            raise ActionError(f"run {run.pk} is already released")
        Run.objects.filter(pk=run.pk).update(released=True)
        run.released = True
        _record(run, "release", actor=actor, reason=reason)
    return run
