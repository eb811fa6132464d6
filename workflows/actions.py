"""Operator actions on runs: retry, cancel, approve, skip, release, each recorded with who and why.

The CLI (`manage.py workflows ...`) and the admin call these; they never save models
directly. Each action locks the run, checks it applies, changes state through
`transitions`, records a RunEvent, and wakes the engine after commit.
"""

from __future__ import annotations

import datetime

from django.db import OperationalError, transaction
from django.db.models import QuerySet

from workflows import cleanups, engine, transitions
from workflows.models import Run, StepRun

#: PostgreSQL's SQLSTATE for a NOWAIT lock that another transaction holds.
LOCK_NOT_AVAILABLE = "55P03"


class ActionError(Exception):
    """The action does not apply to the run or step in its current state."""


def _lock_run(run_id: int) -> Run:
    run = Run.objects.select_for_update().filter(pk=run_id).first()
    if run is None:
        raise ActionError(f"run {run_id} does not exist")
    return run


def _lock_steps(run: Run, steps: QuerySet[StepRun]) -> list[StepRun]:
    """Lock these steps of `run` (its row is locked), or refuse if a worker is executing one.

    A worker executing a step holds the step's lock and then takes its run's to record a
    finish; waiting here for the step while holding the run would deadlock with it. So the
    lock order stays run, then step, and a step that is busy is not waited for.
    """
    try:
        with transaction.atomic():
            return list(steps.select_for_update(nowait=True).order_by("position"))
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        raise ActionError(
            f"run {run.pk}: a step is executing right now; try again in a few seconds"
        ) from exc


def _step(run: Run, step_name: str) -> StepRun:
    found = _lock_steps(run, run.steps.filter(name=step_name))
    if not found:
        names = ", ".join(run.steps.values_list("name", flat=True)) or "none yet"
        raise ActionError(f"run {run.pk} has no step {step_name!r} (steps: {names})")
    return found[0]


def _due_now(run: Run) -> None:
    """The run must be scheduled: if the wake-up message is lost, the reconciler sends it."""
    Run.objects.filter(pk=run.pk).update(wake_at=engine.clock())


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
    seconds = run.spec.get("deadlineSeconds")
    transitions.run_move(
        run,
        Run.State.RUNNING,
        allowed_from=[run.state],
        message=f"workflow {run.template_name} is running",
        finished_at=None,
        deadline_exceeded=False,
        deadline_at=engine.clock() + datetime.timedelta(seconds=seconds) if seconds else None,
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
            else _lock_steps(run, run.steps.filter(state__in=retryable))
        )
        if not steps or any(s.state not in retryable for s in steps):
            what = f"step {step_name!r}" if step_name else "any step"
            raise ActionError(f"run {run.pk}: {what} is not failed or cancelled")
        for step in steps:
            # A new generation: what the step creates gets new names, so the failed
            # attempt's objects are not mistaken for the retry's.
            memo = {"generation": int(step.memo.get("generation", 0)) + 1}
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
        transitions.action_record(run, "retry", actor=actor, reason=reason, step_name=step_name)
        _due_now(run)
        transaction.on_commit(lambda: engine.wake([run.pk]))
    return run


def run_cancel(*, run_id: int, actor: str, reason: str) -> Run:
    """Stop a run and its unfinished steps; the lifecycle keeps holding unless released."""
    _require_actor(actor, reason)
    with transaction.atomic():
        run = _lock_run(run_id)
        if run.is_finished:
            raise ActionError(f"run {run.pk} is already {run.state}")
        unfinished = _lock_steps(run, run.steps.exclude(state__in=StepRun.FINISHED))
        for step in unfinished:
            transitions.step_move(
                step, StepRun.State.CANCELLED, allowed_from=[step.state], record=False
            )
        # What the started steps created (a conformance Namespace, ...) is deleted after commit.
        cleanups.after_cancel(unfinished)
        transitions.run_move(
            run,
            Run.State.CANCELLED,
            allowed_from=Run.ACTIVE,
            message=f"workflow {run.template_name} was cancelled by an operator; "
            f"retry it with `manage.py workflows retry {run.pk}` or release the hold",
            actor=actor,
            reason=reason,
        )
        transitions.action_record(run, "cancel", actor=actor, reason=reason)
    return run


def step_approve(*, run_id: int, step_name: str, actor: str, reason: str) -> Run:
    """Approve an approval step: it succeeds the next time it runs, which is now."""
    _require_actor(actor, reason)
    with transaction.atomic():
        run = _lock_run(run_id)
        step = _step(run, step_name)
        if step.type != "approval":
            raise ActionError(f"step {step_name!r} is a {step.type} step, not an approval")
        if step.state in StepRun.FINISHED:
            raise ActionError(f"step {step_name!r} is already {step.state}")
        memo = {**step.memo, "approved_by": actor, "reason": reason}
        due = step.due_at if step.state == StepRun.State.PENDING else engine.clock()
        StepRun.objects.filter(pk=step.pk).update(memo=memo, due_at=due)
        transitions.action_record(run, "approve", actor=actor, reason=reason, step_name=step_name)
        step_id = step.pk
        transaction.on_commit(lambda: engine._enqueue_steps([step_id]))
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
            message="skipped by an operator",
            actor=actor,
            reason=reason,
        )
        if (
            run.state in (Run.State.FAILED, Run.State.CANCELLED)
            and not run.steps.filter(state__in=[StepRun.State.FAILED]).exists()
        ):
            _resume(run, actor=actor, reason=reason)
        transitions.action_record(run, "skip", actor=actor, reason=reason, step_name=step_name)
        _due_now(run)
        transaction.on_commit(lambda: engine.wake([run.pk]))
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
        transitions.action_record(run, "release", actor=actor, reason=reason)
    return run
