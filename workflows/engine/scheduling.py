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
import logging
from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import transaction

from workflows import clock
from workflows.definitions import typed
from workflows.engine import (
    attempts,
    dispatch,
    leases,
    lifecycle,
    messages,
    observe,
    sql,
    stepstate,
    supersede,
    transitions,
)
from workflows.models import Run, StepRun

logger = logging.getLogger(__name__)

_M = TypeVar("_M", Run, StepRun)

#: How often a run waiting for a concurrency slot or for another workflow looks again.
START_RECHECK_SECONDS = 5
START_RECHECK = datetime.timedelta(seconds=START_RECHECK_SECONDS)


def advance(run_id: int, tried: Sequence[attempts.Tried] = ()) -> None:
    """Record `tried` (attempts of this run's steps), schedule the run, run its due steps.

    Goes on until nothing is due at once: a chain of inline steps runs to its end here,
    one short transaction per step.
    """
    pending = list(tried)
    while True:
        # A lease is extended until its outcome is recorded, not only while its step's code
        # runs: an outcome may wait for the run's lock, and a claimed step for those before it.
        with leases.heartbeat.hold([t.attempt.lease for t in pending]):
            claimed = _record_and_claim(run_id, pending)
        pending = []
        with leases.heartbeat.hold([a.lease for a in claimed]):
            for attempt in claimed:
                done = attempts.run(attempt)
                if done.repeats:
                    attempts.record_repeats([done])  # a poll again: its own row, not the run's
                else:
                    pending.append(done)
        if not pending:
            return


def _record_and_claim(run_id: int, pending: list[attempts.Tried]) -> list[attempts.Attempt]:
    """Record `pending` and claim the run's steps due next (what this worker runs itself):
    one outcome on its fast path where lifecycle.route gives it one, else under the run's lock."""
    if len(pending) == 1:
        fast = attempts.record_fast(pending[0])
        if fast is not None:
            if fast.finished is not None:
                _succeeded(_instance(Run, fast.finished))
                return []
            return fast.claimed or (_schedule(run_id, []) if fast.settle else [])
    return _schedule(run_id, pending)


def run_step(step_id: int) -> None:
    """Attempt one step if it is claimable, then advance its run if the step moved on."""
    claimed = attempts.claim(step_ids=[step_id])
    if not claimed:
        return  # not due, its run not running, or another attempt holds it
    done = attempts.run(claimed[0])
    if done.repeats:
        attempts.record_repeats([done])
        return
    advance(claimed[0].run.pk, [done])


def _schedule(run_id: int, tried: Sequence[attempts.Tried]) -> list[attempts.Attempt]:
    """Under the run's lock: record `tried`, start the run, promote steps, settle its state,
    and claim the due steps this worker runs next (the others are sent)."""
    # Outcomes of inline steps (no side effects) need not wait for the disk: were the
    # commit lost in a crash, the steps would run again to the same outcomes.
    asynchronous = bool(tried) and all(lifecycle.inline(t.attempt.step.type) for t in tried)
    with transaction.atomic():
        run = _lock(run_id, asynchronous=asynchronous)
        if run is None:
            return []
        for each in tried:
            attempts.record_scheduled(each, run=run)
        if run.is_finished:
            return []
        now = clock.now()
        if supersede.applies(run):
            # Once this commits, not under this run's lock (see the module's docstring); at
            # every schedule, so that one cut short by a dead worker is done at the next.
            transaction.on_commit(lambda: supersede.supersede(run_id), robust=True)
        made: Judged | None = None
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
            # Read again: the budget's lock may have waited for another start, while runs
            # ended; a start stamped before them would seem to overlap them.
            now = clock.now()
            made = _run_start(run, now)
        steps, claimable, promotable = made or _steps(run_id, now)
        passed = run.deadline_at and now >= run.deadline_at and not run.deadline_exceeded
        if passed:
            _deadline_act(run, steps, now)
            if run.is_finished:
                return []
        failed = any(s.state == StepRun.State.FAILED for s in steps)
        mine = [] if failed else _mine(steps, claimable | promotable)
        others = [s.pk for s in steps if s.pk in promotable and s not in mine]
        for step in steps:
            if step.pk in others:
                stepstate.apply(step, lifecycle.promote(now))
        claimed = attempts.claim(step_ids=[s.pk for s in mine if s.pk in promotable], promote=True)
        claimed += attempts.claim(step_ids=[s.pk for s in mine if s.pk not in promotable])
        by_id = {a.step.pk: a.step for a in claimed}
        steps = [by_id.get(s.pk, s) for s in steps]
        if not failed:
            # The due steps this worker does not run itself (the ones it just promoted too).
            due = (claimable | set(others)) - set(by_id)
            dispatch.run_steps(s.pk for s in steps if s.pk in due)
        # A claimed inline step is back here in a moment: its run's message can wait.
        inline = any(lifecycle.inline(a.step.type) for a in claimed)
        _settle(run, steps, now, message=not inline)
        return claimed if run.state == Run.State.RUNNING else []


def _lock(run_id: int, *, asynchronous: bool) -> Run | None:
    """The run's row, locked (queries.sql `lock_run` says why its steps are read apart)."""
    found = sql.named(
        "lock_run", {"run": run_id, "commit": "off" if asynchronous else "on"}, json=("spec",)
    )
    return _instance(Run, found[0]) if found else None


Judged = tuple[list[StepRun], set[int], set[int]]


def _steps(run_id: int, now: datetime.datetime) -> Judged:
    """The run's steps in their order, and which of them PostgreSQL finds claimable and
    promotable now (queries.sql `run_steps`)."""
    return _judged(sql.named("run_steps", {"run": run_id, "now": now}, json=("depends_on",)))


def _judged(rows: list[dict[str, Any]]) -> Judged:
    """Steps as run_steps (or start_run) returns them: each, and the ids of those PostgreSQL
    found claimable and promotable."""
    claimable = {row["id"] for row in rows if row.pop("claimable")}
    promotable = {row["id"] for row in rows if row.pop("promotable")}
    return [_instance(StepRun, row) for row in rows], claimable, promotable


def _instance(model: type[_M], row: dict[str, Any]) -> _M:
    """A model instance from a row of some of its columns (the others deferred), as the ORM
    would build it."""
    names = [f.attname for f in model._meta.concrete_fields if f.attname in row]
    return model.from_db("default", names, [row[name] for name in names])


def _mine(steps: list[StepRun], due: set[int]) -> list[StepRun]:
    """The due steps this worker runs itself: every inline one, else the first due one."""
    found = [s for s in steps if s.pk in due]
    return [s for s in found if lifecycle.inline(s.type)] or found[:1]


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
    sql.named("budget_lock", {"template": template_name})


def _run_start(run: Run, now: datetime.datetime) -> Judged | None:
    """Move the run to RUNNING with its steps from its spec, one statement (stepstate.start);
    its steps as run_steps judges them, or None if some were there already (then read)."""
    spec = typed.of(run.spec)
    # What the run says once its first steps are due (see _settle), and when it must be
    # woken (its deadline): written with the move, so that scheduling need not write the
    # run's row again, nor a first poll (writes.Path.ALONE) take the run's lock.
    first = next((s for s in spec.steps if not s.depends_on), None)
    message = (
        messages.run_running_step(run.template_name, first.name)
        if first is not None
        else messages.run_running(run.template_name)
    )
    wake_at = _wake_at(run)
    rows = stepstate.start(run, spec.steps, message=message, now=now, wake_at=wake_at)
    run.state, run.message, run.started_at, run.wake_at = Run.State.RUNNING, message, now, wake_at
    logger.info("run started", extra={"action": "run_started", **observe.log_fields(run)})
    dispatch.cluster_event(run.pk, "started")
    return _judged(rows) if len(rows) == len(spec.steps) else None


def settle(run: Run) -> None:
    """Finish `run` now if its steps say so, in the caller's transaction and under the run's
    lock it holds: an operator's skip of the last unfinished step ends the run at once, so
    that a run's state never lags its steps' (the stateful test's invariant found a running
    run whose steps were all skipped, until its `advance` message came)."""
    now = clock.now()
    steps, _, _ = _steps(run.pk, now)
    _settle(run, steps, now, message=True)


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
        _succeeded(run)
        return
    wake_at = _wake_at(run)
    if not message:
        if wake_at != run.wake_at:
            Run.objects.filter(pk=run.pk).update(wake_at=wake_at)
            run.wake_at = wake_at
        return
    text = lifecycle.run_message(name, steps)
    if text != run.message or wake_at != run.wake_at:
        Run.objects.filter(pk=run.pk).update(message=text, wake_at=wake_at)
        run.message, run.wake_at = text, wake_at


def _succeeded(run: Run) -> None:
    """What follows a run's success (recorded here or by its last step's statement,
    queries.sql `succeed_and_finish_run`): its log line, its Event, the runs it held up."""
    logger.info("run succeeded", extra={"action": "run_succeeded", **observe.log_fields(run)})
    dispatch.cluster_event(run.pk, "succeeded")
    _wake_waiters(run)


def _wake_at(run: Run) -> datetime.datetime | None:
    """When a running run must be woken: for its deadline only. Due steps are the
    reconciler's to find by their own due_at (a lost countdown), so polls never touch the
    run's row, and the reconciler never sends a run and its step the same message."""
    return run.deadline_at if run.deadline_at and not run.deadline_exceeded else None


def _deadline_act(run: Run, steps: list[StepRun], now: datetime.datetime) -> None:
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
                stepstate.apply(step, lifecycle.cancelled(step, now))
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
