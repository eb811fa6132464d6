"""The worker path: advance a run (start it, promote its steps, settle its state) and its steps.

`advance` schedules the run in short transactions that lock the run's row: record the
outcomes of its steps' attempts (workflows.engine.attempts, by lease), start the run when
its `concurrency` budget and `waitFor` allow, act on a passed deadline, promote steps
whose dependencies are done, settle the run's state and message, and claim its due
steps. No step's code runs under the run's lock or in any transaction: the claimed steps
run after the commit, and their outcomes are recorded in the next transaction. The
worker runs every due step of an inline type (no I/O) itself and the first due other
step; every other due step gets its own message. `run_step` attempts one step (a
countdown, a retry, an approval, the reconciler) and advances its run if it moved on.

Lock order: a run's row, then its steps' rows (as operator actions take them), so the
two never deadlock; what locks steps alone (a batch's claim and write-back, the lease
heartbeat) takes them in id order or skips locked ones.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import models, transaction

from workflows import clock
from workflows.definitions import typed
from workflows.engine import (
    attempts,
    cleanups,
    dispatch,
    leases,
    messages,
    observe,
    sql,
    stalls,
    stepstate,
    transitions,
)
from workflows.models import Run, StepRun
from workflows.steps import registry

logger = logging.getLogger(__name__)

_M = TypeVar("_M", Run, StepRun)

#: How often a run waiting for a concurrency slot or for another workflow looks again.
START_RECHECK_SECONDS = 5
START_RECHECK = datetime.timedelta(seconds=START_RECHECK_SECONDS)


def advance(run_id: int, results: Sequence[attempts.Result] = ()) -> None:
    """Record `results` (attempts of this run's steps), schedule the run, run its due steps.

    Goes on until nothing is due at once: a chain of inline steps runs to its end here,
    one short transaction per step.
    """
    pending = list(results)
    while True:
        # A lease is extended until its outcome is recorded, not only while its step's code
        # runs: an outcome may wait for the run's lock, and a claimed step for those before it.
        with leases.heartbeat.hold([r.attempt.lease for r in pending]):
            claimed = _record_and_claim(run_id, pending)
        pending = []
        with leases.heartbeat.hold([a.lease for a in claimed]):
            for attempt in claimed:
                result = attempts.run(attempt)
                if result.repeats:
                    attempts.record([result])  # a poll again: its own row only, not the run's
                else:
                    pending.append(result)
        if not pending:
            return


def _record_and_claim(run_id: int, pending: list[attempts.Result]) -> list[attempts.Attempt]:
    """Record `pending` and claim the run's steps due next (what this worker runs itself)."""
    if len(pending) == 1 and attempts.can_claim_next(pending[0]):
        # The fast path of a chain: record and claim what it made due, one statement.
        recorded = attempts.record(pending, claim_next=True)
        if recorded.next is not None:
            return recorded.next or _schedule(run_id, [])
    # A first poll the run's answer does not show: its own row, one statement.
    if (
        len(pending) == 1
        and attempts.starts_waiting_alone(pending[0])
        and attempts.record_first_poll(pending[0])
    ):
        return []
    return _schedule(run_id, pending)


def run_step(step_id: int) -> None:
    """Attempt one step if it is claimable, then advance its run if the step moved on."""
    claimed = attempts.claim(step_ids=[step_id])
    if not claimed:
        return  # not due, its run not running, or another attempt holds it
    result = attempts.run(claimed[0])
    if result.repeats:
        attempts.record([result])
        return
    advance(claimed[0].run.pk, [result])


def _schedule(run_id: int, results: Sequence[attempts.Result]) -> list[attempts.Attempt]:
    """Under the run's lock: record `results`, start the run, promote steps, settle its state,
    and claim the due steps this worker runs next (the others are sent)."""
    # Outcomes of inline steps (no side effects) need not wait for the disk: were the
    # commit lost in a crash, the steps would run again to the same outcomes.
    asynchronous = bool(results) and all(_inline(r.attempt.step.type) for r in results)
    with transaction.atomic():
        run, steps = _lock(run_id, asynchronous=asynchronous)
        if run is None:
            return []
        if results:
            _record(run, results, steps)
        if run.is_finished:
            return []
        now = clock.now()
        if run.state == Run.State.PENDING:
            blocker, until_changed = _start_blocker(run)
            if blocker:
                # A failed or cancelled workflow it waits for changes only when an operator
                # acts on it, which wakes this run (workflows.operators.actions): no wake-up
                # meanwhile, so that an idle server stays idle.
                wake = None if until_changed else now + START_RECHECK
                stale = (
                    run.wake_at is not None
                    if wake is None
                    else not run.wake_at or run.wake_at <= now
                )
                if blocker != run.message or stale:
                    Run.objects.filter(pk=run.pk).update(message=blocker, wake_at=wake)
                return []
            steps = _run_start(run, now)
        passed = run.deadline_at and now >= run.deadline_at and not run.deadline_exceeded
        if passed:
            _deadline_act(run, steps)
            if run.is_finished:
                return []
        promotable = _promotable(steps)
        mine = [] if _failed(steps) else _mine(steps, promotable, now)
        _promote([s for s in promotable if s not in mine], now)
        claimed = attempts.claim(step_ids=[s.pk for s in mine if s in promotable], promote=True)
        claimed += attempts.claim(step_ids=[s.pk for s in mine if s not in promotable])
        for attempt in claimed:
            _apply(steps, attempt.step)
        dispatch.run_steps(s.pk for s in steps if _claimable(s, now) and s not in mine)
        # A claimed inline step is back here in a moment: its run's message can wait.
        _settle(run, steps, now, message=not any(_inline(a.step.type) for a in claimed))
        return claimed if run.state == Run.State.RUNNING else []


def _lock(run_id: int, *, asynchronous: bool) -> tuple[Run | None, list[StepRun]]:
    """The run's row, locked, then its steps in their order: two statements, so that the
    steps are read after the lock is held (sql.LOCK_RUN says why). A pending run has no
    steps yet (they are made as it starts, under this lock): they are not read."""
    params = {"run": run_id, "commit": "off" if asynchronous else "on"}
    locked = sql.fetch(sql.LOCK_RUN, params)
    if not locked:
        return None, []
    run = _from_row(Run, sql.SCHEDULE_RUN_COLUMNS, locked[0])
    if run.state == Run.State.PENDING:
        return run, []
    rows = sql.fetch(sql.RUN_STEPS, {"run": run_id})
    return run, [_from_row(StepRun, sql.SCHEDULE_STEP_COLUMNS, r) for r in rows]


def _from_row(model: type[_M], columns: Sequence[str], values: Sequence[Any]) -> _M:
    """A model instance from a raw row of these columns (the others deferred), as the ORM
    would build it: jsonb arrives as text through a raw cursor."""
    decoded = [
        json.loads(v) if c in _JSON_COLUMNS and isinstance(v, str | bytes) else v
        for c, v in zip(columns, values, strict=True)
    ]
    return model.from_db("default", columns, decoded)


#: The JSON columns scheduling reads (they are named alike in both tables).
_JSON_COLUMNS = frozenset(
    str(f.column)
    for model in (Run, StepRun)
    for f in model._meta.concrete_fields
    if isinstance(f, models.JSONField)
)


def _record(run: Run, results: Sequence[attempts.Result], steps: list[StepRun]) -> None:
    """Record the attempts' outcomes (by lease) and carry what was written into `steps`."""
    for result, decision in zip(results, attempts.record(results).decisions, strict=True):
        if decision is None:
            continue
        step = result.attempt.step
        _apply(steps, step)
        # Only a first poll comes here (a repeated one is recorded alone): it starts waiting.
        if decision.state == StepRun.State.WAITING and registry.waits_for_person(step.type):
            _announce_person(run, step)


def _announce_person(run: Run, step: StepRun) -> None:
    """An Event on the Cluster: the run waits for a person, what for, and how to approve."""
    moment = f"{run.hook} {run.moment}" if run.moment else run.hook
    text = messages.run_awaiting_person(
        run.pk,
        run.template_name,
        registry.waiting_message(step.type),
        step.name,
        moment=moment,
        asks=registry.asks(step.params, waits_for_person=True),
    )
    dispatch.cluster_event(run.pk, dispatch.AWAITING_APPROVAL, text)


#: The columns an attempt's claim or record changes, copied onto the scheduler's rows.
_ATTEMPT_FIELDS = (
    "state",
    "due_at",
    "finished_at",
    "started_at",
    "failures",
    "memo",
    "output",
    "message",
    "claims",
    "lease_owner",
    "lease_expires_at",
)


def _apply(steps: list[StepRun], changed: StepRun) -> None:
    for step in steps:
        if step.pk == changed.pk:
            for name in _ATTEMPT_FIELDS:
                if name in changed.__dict__:
                    setattr(step, name, getattr(changed, name))


def _promotable(steps: list[StepRun]) -> list[StepRun]:
    """Pending steps whose dependencies are all done (succeeded or skipped)."""
    states = {s.name: s.state for s in steps}
    return [
        s
        for s in steps
        if s.state == StepRun.State.PENDING
        and all(states.get(dep) in StepRun.DONE for dep in s.depends_on)
    ]


def _failed(steps: list[StepRun]) -> bool:
    return any(s.state == StepRun.State.FAILED for s in steps)


def _mine(steps: list[StepRun], promotable: list[StepRun], now: datetime.datetime) -> list[StepRun]:
    """The due steps this worker runs itself: every inline one, else the first due one."""
    due = [s for s in steps if s in promotable or _claimable(s, now)]
    return [s for s in due if _inline(s.type)] or due[:1]


def _claimable(step: StepRun, now: datetime.datetime) -> bool:
    """Due, and no attempt holds it (the claim checks again on the row)."""
    leased = step.lease_owner and step.lease_expires_at and step.lease_expires_at > now
    return step.state in StepRun.DUE and bool(step.due_at and step.due_at <= now) and not leased


def _inline(type_name: str) -> bool:
    step_type = registry.find(type_name)
    return step_type is not None and step_type.inline


def _start_blocker(run: Run) -> tuple[str, bool]:
    """Why `run` cannot start yet ("" if it can): another workflow, or the concurrency budget;
    and whether only a change of that workflow (an operator's action) can lift it."""
    spec = typed.of(run.spec)
    name = run.template_name
    for other in spec.wait_for:
        runs = Run.objects.filter(cluster_key=run.cluster_key, template_name=other)
        if runs.filter(state__in=Run.ACTIVE).exists():
            return messages.waiting_for_workflow(name, other), False
        # A run that holds the lifecycle keeps the order even past a failure: removing an
        # add-on while what depends on it failed to go would break the dependent. A run
        # that holds nothing (best effort) goes on. Only the latest run counts, so an old
        # failure that a later run made good does not block.
        latest = runs.order_by("-pk").values_list("pk", "state", "released").first()
        if (
            spec.holds_lifecycle
            and latest is not None
            and latest[1] in (Run.State.FAILED, Run.State.CANCELLED)
            and not latest[2]
        ):
            return messages.waiting_for_failed_workflow(name, other, latest[0], latest[1]), True
    limit = spec.concurrency
    if limit:
        _lock_budget(name)
        running = Run.objects.filter(template_name=name, state=Run.State.RUNNING).count()
        if running >= limit:
            return messages.waiting_for_slot(name, limit), False
    return "", False


def _lock_budget(template_name: str) -> None:
    """Serialise one template's starts: two workers never both take the last slot."""
    sql.execute(sql.BUDGET_LOCK, [template_name])


def _run_start(run: Run, now: datetime.datetime) -> list[StepRun]:
    """Create the run's steps from its spec and move it to RUNNING; its steps, in order."""
    spec = typed.of(run.spec)
    StepRun.objects.bulk_create(
        [
            StepRun(
                run=run,
                name=s.name,
                position=i,
                type=s.type,
                params=dict(s.params),
                depends_on=list(s.depends_on),
                timeout_seconds=(
                    s.timeout_seconds if s.timeout_seconds is not None else _bound(s.type)[0]
                ),
                call_timeout_seconds=_bound(s.type)[1],
                retries=s.retries,
                retry_for_seconds=s.retry_for_seconds,
                waits_for_person=registry.waits_for_person(s.type),
                stall_seconds=(
                    s.stall_seconds
                    if s.stall_seconds is not None
                    else stalls.normal_seconds(s.type, s.params)
                ),
            )
            for i, s in enumerate(spec.steps)
        ],
        ignore_conflicts=True,
    )
    # What the run says once its first steps are due (see _settle), and when it must be
    # woken (its deadline): written with the move, so that scheduling need not write the
    # run's row again, nor a first poll (attempts.record_first_poll) take the run's lock.
    first = next((s for s in spec.steps if not s.depends_on), None)
    transitions.run_move(
        run,
        Run.State.RUNNING,
        allowed_from=[Run.State.PENDING],
        message=messages.run_running_step(run.template_name, first.name)
        if first is not None
        else messages.run_running(run.template_name),
        started_at=now,
        wake_at=_wake_at(run),
    )
    logger.info("run started", extra={"action": "run_started", **observe.log_fields(run)})
    dispatch.cluster_event(run.pk, "started")
    return list(run.steps.all())


def _bound(type_name: str) -> tuple[int, int | None]:
    """A step type's default timeoutSeconds and the bound of one call of its function."""
    step_type = registry.find(type_name)
    if step_type is None:  # unknown: its attempt fails at once
        return registry.DEFAULT_TIMEOUT_SECONDS, registry.DEFAULT_CALL_TIMEOUT_SECONDS
    return step_type.default_timeout_seconds, step_type.call_timeout_seconds


def _promote(steps: list[StepRun], now: datetime.datetime) -> None:
    for step in steps:
        stepstate.move(step, StepRun.State.READY, allowed_from=[StepRun.State.PENDING], due_at=now)


def _settle(run: Run, steps: list[StepRun], now: datetime.datetime, *, message: bool) -> None:
    """Finish the run when its steps say so; otherwise record what it is doing (`message`)."""
    name = run.template_name
    failed = next((s for s in steps if s.state == StepRun.State.FAILED), None)
    if failed is not None:
        transitions.run_move(
            run,
            Run.State.FAILED,
            allowed_from=[Run.State.RUNNING],
            message=messages.run_failed_at_step(run.pk, name, failed.name, failed.message),
        )
        logger.warning("run failed", extra={"action": "run_failed", **observe.log_fields(run)})
        dispatch.cluster_event(run.pk, "failed")
        _wake_waiters(run)
        return
    if all(s.state in StepRun.DONE for s in steps):
        transitions.run_move(run, Run.State.SUCCEEDED, allowed_from=[Run.State.RUNNING], message="")
        logger.info("run succeeded", extra={"action": "run_succeeded", **observe.log_fields(run)})
        dispatch.cluster_event(run.pk, "succeeded")
        _wake_waiters(run)
        return
    wake_at = _wake_at(run)
    if not message:
        if wake_at != run.wake_at:
            Run.objects.filter(pk=run.pk).update(wake_at=wake_at)
            run.wake_at = wake_at
        return
    current = next((s for s in steps if s.state in StepRun.DUE), None)
    waiting = registry.waiting_message(current.type) if current is not None else ""
    if current is None:
        text = messages.run_running(name)
    elif (
        current.state == StepRun.State.WAITING
        and current.message
        and registry.says_own_wait(current.type)
    ):
        text = messages.run_waits(name, current.message, current.name)
    elif waiting and current.state == StepRun.State.WAITING:
        text = messages.run_waiting_at_step(name, waiting, current.name)
    else:
        text = messages.run_running_step(name, current.name)
    if text != run.message or wake_at != run.wake_at:
        Run.objects.filter(pk=run.pk).update(message=text, wake_at=wake_at)
        run.message, run.wake_at = text, wake_at


def _wake_at(run: Run) -> datetime.datetime | None:
    """When a running run must be woken: for its deadline only. Due steps are the
    reconciler's to find by their own due_at (a lost countdown), so polls never touch the
    run's row, and the reconciler never sends a run and its step the same message."""
    return run.deadline_at if run.deadline_at and not run.deadline_exceeded else None


def _deadline_act(run: Run, steps: list[StepRun]) -> None:
    """The deadline passed: Fail ends the run; Block and Proceed are recorded and alerted.

    Fail cancels the unfinished steps at once, also one an attempt is running: that
    attempt's lease ends with the move, so its outcome is dropped when it comes.
    """
    action = typed.of(run.spec).on_deadline
    Run.objects.filter(pk=run.pk).update(deadline_exceeded=True)
    run.deadline_exceeded = True
    transitions.action_record(
        run,
        "deadline",
        actor="hooksvc",
        reason=f"onDeadline: {action}",
        message=messages.run_missed_deadline(run.template_name),
    )
    logger.warning(
        "run passed its deadline",
        extra={"action": "run_deadline", "on_deadline": action, **observe.log_fields(run)},
    )
    if action == typed.FAIL:
        for step in steps:
            if step.state not in StepRun.FINISHED:
                stepstate.move(
                    step, StepRun.State.CANCELLED, allowed_from=[step.state], record=False
                )
        cleanups.after_stop(s for s in steps if s.state == StepRun.State.CANCELLED)
        transitions.run_move(
            run,
            Run.State.FAILED,
            allowed_from=[Run.State.RUNNING],
            message=messages.run_missed_deadline(run.template_name),
        )
        dispatch.cluster_event(run.pk, "failed")
        _wake_waiters(run)


def _wake_waiters(run: Run) -> None:
    """A finished run frees a budget slot and may be what another run waits for.

    Only a template with a concurrency budget has runs waiting for a slot; without one,
    its pending runs are not waiting for this run and already have their own wake-up.
    """
    waiting: list[int] = []
    if typed.of(run.spec).concurrency:
        waiting += Run.objects.filter(
            state=Run.State.PENDING, template_name=run.template_name
        ).values_list("pk", flat=True)[:10]
    waiting += Run.objects.filter(state=Run.State.PENDING, cluster_key=run.cluster_key).values_list(
        "pk", flat=True
    )[:10]
    if waiting:
        # One that waited for a failed workflow has no wake-up of its own (see _schedule):
        # due now, the reconciler sends it if this message is lost.
        Run.objects.filter(pk__in=waiting, wake_at__isnull=True).update(wake_at=clock.now())
    dispatch.advance(sorted(set(waiting)))
