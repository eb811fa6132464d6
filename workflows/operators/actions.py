"""Operator actions on runs: retry, cancel, approve, skip, release, each recorded with who and why.

The CLI (`manage.py workflows ...`) and the admin call these; they never save models directly. Each
action locks the run, checks that the actor may do it there (workflows.operators.access: a run the
actor may not see "does not exist"; one they may see but not act on raises `access.Denied`), checks
it applies, changes a run's state through `transitions` and a step's as workflows.engine.lifecycle
decides (stepstate writes), records a RunEvent with the actor's name and identity-provider subject
and e-mail, and wakes the engine after commit. Once it commits, it writes a log line (`action:
operator_action`) with the operator, the run and the reason.
"""

from __future__ import annotations

import datetime
import logging

from django.db import transaction
from django.db.models import Q, QuerySet

from workflows import clock
from workflows.definitions import typed
from workflows.engine import (
    dispatch,
    lifecycle,
    messages,
    observe,
    scheduling,
    stepstate,
    transitions,
)
from workflows.models import Run, RunEvent, StepRun
from workflows.operators import access, reasons
from workflows.steps import memo as memo_keys

logger = logging.getLogger(__name__)


class ActionError(Exception):
    """The action does not apply to the run or step in its current state."""


class AlreadyDone(ActionError):
    """What the action would do is done already (approved, running, released...): nothing
    was changed or recorded. Callers that are idempotent (the API, the CLI) say so and
    succeed; two people approving at once record one approval."""


def _lock_run(run_id: int, actor: access.Actor, action: str) -> Run:
    """The run, locked, once `actor` may do `action` on it."""
    run = (
        Run.objects.select_for_update()
        .filter(Q(pk=run_id) & actor.where(access.Permission.VIEW))
        .first()
    )
    if run is None:
        raise ActionError(f"run {run_id} does not exist")
    actor.require(access.ACTIONS[action], run.cluster_namespace, f"{action} runs")
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


def _wake_waiting(run: Run) -> None:
    """The cluster's runs waiting to start may wait for this one (waitFor): once it is
    retried, skipped past or released they look again, at once. One that waits for a failed
    run has no wake-up of its own meanwhile (workflows.engine.scheduling); due now, the
    reconciler sends it if this message is lost."""
    waiting = list(
        Run.objects.filter(cluster_key=run.cluster_key, state=Run.State.PENDING)
        .exclude(pk=run.pk)
        .values_list("pk", flat=True)[:WAKE_LIMIT]
    )
    if waiting:
        Run.objects.filter(pk__in=waiting).update(wake_at=clock.now())
        dispatch.advance(waiting)


#: At most this many waiting runs of a cluster are woken by an action (a cluster has a few).
WAKE_LIMIT = 50
#: The longest reason the run's history keeps (RunEvent.reason).
REASON_LENGTH = 500


def _record(
    run: Run, action: str, *, actor: access.Actor, reason: str, step_name: str = ""
) -> None:
    """Record the action in the run's history, and in the log once it commits."""
    event = transitions.action_record(
        run, action, actor=actor.name, reason=reason, step_name=step_name
    )
    if actor.subject or actor.email:
        # Who the identity provider says acted; the engine's record has the name only.
        RunEvent.objects.filter(pk=event.pk).update(
            actor_subject=actor.subject, actor_email=actor.email
        )
    fields = {
        **observe.log_fields(run),
        "action": "operator_action",
        "operation": action,
        "actor": actor.name,
        "reason": reason,
    }
    if actor.subject:
        fields["actor_subject"] = actor.subject
    if step_name:
        fields["step"] = step_name
    message = f"operator {actor.name} did {action} on run {run.pk}"
    transaction.on_commit(lambda: logger.info(message, extra=fields))


def _require_actor(actor: str | access.Actor, reason: str) -> access.Actor:
    """The actor as an Actor (a plain name is a trusted caller's: access.actor_of)."""
    found = access.actor_of(actor)
    if not found.name.strip():
        raise ActionError("an action needs the operator's name")
    if not reason.strip():
        raise ActionError("an action needs a reason")
    wrong = reasons.problem(reason)
    if wrong:
        raise ActionError(wrong)
    # Refused here, not by the database: the CLI has no form that bounds it, as the API has.
    if len(reason) > REASON_LENGTH:
        raise ActionError(f"reason: at most {REASON_LENGTH} characters")
    return found


def _resume(run: Run, *, actor: access.Actor, reason: str) -> None:
    """A finished run goes on running: after a retry, or a skip of what stopped it.

    A deadline restarts from the resumption: the operator gives the run its full time
    again (an old, passed deadline would fail or hold it at once). The steps cancelled with
    the run go back to waiting for their turn: left cancelled, nothing would ever finish
    them, and the run would stay running for ever (the stateful test found it after a skip
    resumed a cancelled run).
    """
    for step in run.steps.filter(state=StepRun.State.CANCELLED):
        stepstate.apply(step, lifecycle.requeued())
    seconds = typed.of(run.spec).deadline_seconds
    transitions.run_move(
        run,
        Run.State.RUNNING,
        allowed_from=[run.state],
        message=messages.run_running(run.template_name),
        finished_at=None,
        deadline_exceeded=False,
        deadline_at=clock.now() + datetime.timedelta(seconds=seconds) if seconds else None,
        actor=actor.name,
        reason=reason,
    )


def run_retry(*, run_id: int, actor: str | access.Actor, reason: str, step_name: str = "") -> Run:
    """Run a failed or cancelled step (or all of them) again from the start."""
    who = _require_actor(actor, reason)
    with transaction.atomic():
        run = _lock_run(run_id, who, "retry")
        retryable = [StepRun.State.FAILED, StepRun.State.CANCELLED]
        steps = (
            [_step(run, step_name)]
            if step_name
            else _lock_steps(run.steps.filter(state__in=retryable))
        )
        # A run going on with nothing failed (or that step on its way again): retried
        # already, or never stopped. A step that succeeded is no retry's business.
        going_on = not steps or steps[0].state not in (*retryable, *StepRun.DONE)
        if run.state in Run.ACTIVE and going_on:
            if step_name:
                raise AlreadyDone(
                    f"run {run.pk} is already {run.state}: step {step_name!r} is {steps[0].state}"
                )
            raise AlreadyDone(_nothing_to_retry(run, step_name))
        if not steps or any(s.state not in retryable for s in steps):
            raise ActionError(_nothing_to_retry(run, step_name))
        # A failure that names its own ways on (a gate of an abandoned rollout) comes back
        # at once: the retry would be recorded, and mislead.
        final = next((s for s in steps if messages.names_ways_out(s.message)), None)
        if final is not None:
            raise ActionError(
                f"run {run.pk}: a retry of step {final.name!r} fails again: {final.message}"
            )
        for step in steps:
            stepstate.apply(step, lifecycle.retried(step), actor=who.name, reason=reason)
        if run.state in (Run.State.FAILED, Run.State.CANCELLED):
            _resume(run, actor=who, reason=reason)
        _record(run, "retry", actor=who, reason=reason, step_name=step_name)
        _due_now(run)
        dispatch.advance([run.pk])
        _wake_waiting(run)
    return run


def _nothing_to_retry(run: Run, step_name: str) -> str:
    """Why a retry does not apply: the step's state, or every step's when none was named."""
    if step_name:
        state = run.steps.filter(name=step_name).values_list("state", flat=True).first()
        return (
            f"run {run.pk}: step {step_name!r} is in state {state}; only a failed or "
            "cancelled step can be retried"
        )
    found = ", ".join(
        f"{name} {state}"
        for name, state in run.steps.order_by("position").values_list("name", "state")
    )
    return f"run {run.pk} has no failed or cancelled step to retry: the run is {run.state}, " + (
        f"its steps are {found}" if found else "it has no steps yet"
    )


def run_cancel(*, run_id: int, actor: str | access.Actor, reason: str) -> Run:
    """Stop a run and its unfinished steps; the lifecycle keeps holding unless released."""
    who = _require_actor(actor, reason)
    with transaction.atomic():
        run = _lock_run(run_id, who, "cancel")
        if run.state == Run.State.CANCELLED:
            raise AlreadyDone(f"run {run.pk} is already cancelled")
        if run.is_finished:
            raise ActionError(f"run {run.pk} is already {run.state}")
        now = clock.now()
        # What a step that was ever claimed may have made (a conformance Namespace, ...) is
        # deleted after commit (the Write says `cleanup`).
        for step in _lock_steps(run.steps.exclude(state__in=StepRun.FINISHED)):
            stepstate.apply(step, lifecycle.cancelled(step, now))
        transitions.run_move(
            run,
            Run.State.CANCELLED,
            allowed_from=Run.ACTIVE,
            message=messages.run_cancelled(run.pk, run.template_name),
            actor=who.name,
            reason=reason,
        )
        _record(run, "cancel", actor=who, reason=reason)
    return run


def step_approve(*, run_id: int, step_name: str, actor: str | access.Actor, reason: str) -> Run:
    """Approve a step that waits for a person: it succeeds the next time it runs, which is now."""
    who = _require_actor(actor, reason)
    with transaction.atomic():
        run = _lock_run(run_id, who, "approve")
        step = _step(run, step_name)
        if not lifecycle.waits_for_person(step.type):
            raise ActionError(lifecycle.approvable(step))
        if step.memo.get(memo_keys.APPROVED_BY):
            # Approved, whether the engine has seen it yet or not: under the run's lock,
            # so of two approvals at once the second finds the first.
            raise AlreadyDone(
                f"step {step_name!r} of run {run.pk} is already approved "
                f"(by {step.memo[memo_keys.APPROVED_BY]})"
            )
        refused = lifecycle.approvable(step)
        if refused:
            raise ActionError(refused)
        # Ends the lease of an attempt polling it now, whose outcome ("no approval yet")
        # is then dropped rather than written over the approval; due now, it is attempted.
        write = lifecycle.approved(step, by=who.name, reason=reason, at=clock.now())
        stepstate.apply(step, write)
        _record(run, "approve", actor=who, reason=reason, step_name=step_name)
    return run


def step_skip(*, run_id: int, step_name: str, actor: str | access.Actor, reason: str) -> Run:
    """Mark a step skipped: its dependents go on as if it had succeeded."""
    who = _require_actor(actor, reason)
    with transaction.atomic():
        run = _lock_run(run_id, who, "skip")
        step = _step(run, step_name)
        if step.state == StepRun.State.SKIPPED:
            raise AlreadyDone(f"step {step_name!r} of run {run.pk} is already skipped")
        if step.state in StepRun.DONE:
            raise ActionError(f"step {step_name!r} is already {step.state}")
        stepstate.apply(step, lifecycle.skipped(step, clock.now()), actor=who.name, reason=reason)
        if (
            run.state in (Run.State.FAILED, Run.State.CANCELLED)
            and not run.steps.filter(state__in=[StepRun.State.FAILED]).exists()
        ):
            _resume(run, actor=who, reason=reason)
        if run.state == Run.State.RUNNING:
            scheduling.settle(run)
        _record(run, "skip", actor=who, reason=reason, step_name=step_name)
        _due_now(run)
        dispatch.advance([run.pk])
        _wake_waiting(run)
    return run


def run_release(*, run_id: int, actor: str | access.Actor, reason: str) -> Run:
    """Let the lifecycle proceed whatever the run's state; the run itself is left as it is."""
    who = _require_actor(actor, reason)
    with transaction.atomic():
        run = _lock_run(run_id, who, "release")
        if run.released:
            raise AlreadyDone(f"run {run.pk} is already released")
        Run.objects.filter(pk=run.pk).update(released=True)
        run.released = True
        _record(run, "release", actor=who, reason=reason)
        _wake_waiting(run)
    return run
