"""The workflow engine: hook calls ensure runs and read their state; workers advance them.

Hook path (`answer`): pick the matching templates, ensure one run per (template, cluster,
moment) with an insert that the unique constraint arbitrates, wake the worker, and answer
from the runs' recorded state. No slow work, a handful of indexed queries.

Worker path (`advance`, `run_step`): under the run's row lock, start the run when its
budget allows, promote steps whose dependencies are done, and execute due steps, each
under its own row lock (`SKIP LOCKED`, so a step is never executed twice at once). A step
that must wait briefly is re-enqueued with a countdown; a long wait is left to the batch
poller (workflows.polls); nothing sleeps. `reconcile` re-enqueues what is overdue, so a
lost message or a killed worker delays a run but never loses it.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import logging
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from hooksvc import catalog, metrics, wire
from workflows import cleanups, errors, selection, spec, transitions
from workflows.models import Run, StepRun, WorkflowTemplate
from workflows.steps import registry

logger = logging.getLogger(__name__)

RUN_CONSTRAINT = "workflows_run_moment_uniq"
#: How often a run waiting for a concurrency slot or for another workflow looks again.
START_RECHECK_SECONDS = 5
#: Backoff of failed attempts: base * 2^(n-1), capped, with full jitter.
BACKOFF_BASE_SECONDS = 2.0
BACKOFF_CAP_SECONDS = 300.0
#: After re-enqueueing a run, the reconciler waits this long before doing it again.
RECONCILE_REQUEUE_SECONDS = 60

#: Test and benchmark seams: replaced to observe or speed up the engine without patching.
clock: Callable[[], datetime.datetime] = timezone.now


def _full_jitter(cap: float) -> float:
    # Spreads retries; not a secret, so the standard generator is right (bandit B311).
    return random.uniform(0, cap)  # noqa: S311  # nosec B311


jitter: Callable[[float], float] = _full_jitter


# --- Hook path -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Answer:
    status: catalog.Status
    message: str = ""
    retry_after: int = 0
    #: The runs the answer comes from, for the log line that links a hook call to its runs.
    runs: tuple[int, ...] = dataclasses.field(default=(), compare=False)


PROCEED = Answer(catalog.Status.SUCCESS)


def answer(call: wire.HookCall, *, handler_name: str) -> Answer:
    """Ensure the runs `call` starts and answer from their state."""
    templates, found = _templates_and_runs(call)
    if not templates:
        return PROCEED
    cycle = wait_cycle(templates)
    if cycle:
        # The runs would wait for each other for ever: start none and say why.
        logger.warning(
            "templates wait for each other in a cycle",
            extra={"action": "wait_cycle", "cycle": cycle, "hook": call.hook.name},
        )
        if not call.hook.blocking:
            return PROCEED
        return Answer(catalog.Status.FAILURE, cycle_message(cycle))
    runs = runs_ensure(templates=templates, call=call, found=found)
    run_ids = tuple(r.pk for r in runs)
    if not call.hook.blocking:
        return dataclasses.replace(PROCEED, runs=run_ids)
    now = clock()
    return dataclasses.replace(combine([render(run, now) for run in runs]), runs=run_ids)


def wait_cycle(templates: Sequence[WorkflowTemplate]) -> list[str]:
    """A waitFor cycle among `templates` (names, as a path), [] if none; pure, no query.

    apply_workflows refuses dependsOn cycles of add-on profiles, but rows edited by hand
    (or applied one at a time) can still wait for each other.
    """
    graph = {t.name: list(t.spec.get("waitFor") or []) for t in sorted(templates, key=_name)}
    return spec.cycle(graph)


def _name(template: WorkflowTemplate) -> str:
    return template.name


def cycle_message(cycle: Sequence[str]) -> str:
    return f"workflows wait for each other in a cycle: {' -> '.join(cycle)}; fix their waitFor"


_RUN_ANSWER_FIELDS = (
    "id",
    "template_name",
    "spec",
    "state",
    "message",
    "deadline_at",
    "deadline_exceeded",
    "released",
)


#: The steady-state poll, written out: compiling the equivalent ORM query (a FilteredRelation
#: join) cost more CPU than PostgreSQL spends running it. Runs are joined by their template's
#: name, as the unique constraint (workflows_run_moment_uniq) keys them: a template deleted
#: and made again under the same name still finds its runs in this one query.
#: Its run columns are _RUN_ANSWER_FIELDS, in that order.
_TEMPLATES_AND_RUNS_SQL = (
    "SELECT t.id, t.name, t.spec, t.generation, r.id, r.template_name, r.spec, r.state,"
    " r.message, r.deadline_at, r.deadline_exceeded, r.released"
    " FROM workflows_workflowtemplate t LEFT OUTER JOIN workflows_run r"
    " ON r.template_name = t.name AND r.hook = t.hook AND r.cluster_key = %s"
    " AND r.moment = %s"
    " WHERE t.hook = %s ORDER BY t.name"
)


def _templates_and_runs(call: wire.HookCall) -> tuple[list[WorkflowTemplate], dict[str, Run]]:
    """The hook's matching templates and their runs for this moment, in one query.

    A steady-state poll is this query alone: the runs are joined to their templates.
    """
    hook = call.hook.name
    with connection.cursor() as cursor:
        cursor.execute(
            _TEMPLATES_AND_RUNS_SQL, (call.cluster.key, selection.moment_key(call), hook)
        )
        rows = cursor.fetchall()
    templates: list[WorkflowTemplate] = []
    found: dict[str, Run] = {}
    for template_id, name, spec_json, generation, *run in rows:
        template_spec = decode_json(spec_json)
        if not selection.matches(template_spec, call):
            continue
        templates.append(
            WorkflowTemplate(
                id=template_id, name=name, spec=template_spec, generation=generation, hook=hook
            )
        )
        if run[0] is not None:
            fields = dict(zip(_RUN_ANSWER_FIELDS, run, strict=True))
            fields["spec"] = decode_json(fields["spec"])
            if fields["deadline_at"] is not None and timezone.is_naive(fields["deadline_at"]):
                # SQLite keeps UTC times without their zone (Django's converter adds it).
                fields["deadline_at"] = timezone.make_aware(fields["deadline_at"], datetime.UTC)
            found[name] = Run(**fields)
    return templates, found


def decode_json(value: Any) -> Any:
    # PostgreSQL's jsonb comes as text through Django's connection (JSONField decodes it);
    # SQLite's JSON is text too.
    return json.loads(value) if isinstance(value, str | bytes) else value


def runs_ensure(
    *,
    templates: Sequence[WorkflowTemplate],
    call: wire.HookCall,
    found: dict[str, Run] | None = None,
) -> list[Run]:
    """One run per template for this cluster and moment: found, or created exactly once."""
    moment = selection.moment_key(call)
    key = call.cluster.key
    if found is None:
        found = {
            r.template_name: r
            for r in Run.objects.filter(
                hook=call.hook.name,
                cluster_key=key,
                moment=moment,
                template_name__in=[t.name for t in templates],
            ).only(*_RUN_ANSWER_FIELDS)
        }
    created: list[int] = []
    for template in templates:
        if template.name in found:
            continue
        run = _run_insert(template, call, moment)
        if run is None:  # another call created it first, or a template of the same name did
            run = Run.objects.only(*_RUN_ANSWER_FIELDS).get(
                template_name=template.name, hook=call.hook.name, cluster_key=key, moment=moment
            )
        else:
            created.append(run.pk)
        found[template.name] = run
    if created:
        transaction.on_commit(lambda: wake(created))
    return [found[t.name] for t in templates]


def _run_insert(template: WorkflowTemplate, call: wire.HookCall, moment: str) -> Run | None:
    now = clock()
    deadline = template.spec.get("deadlineSeconds")
    try:
        with transaction.atomic():
            return Run.objects.create(
                template=template,
                template_name=template.name,
                template_generation=template.generation,
                spec=template.spec,
                hook=call.hook.name,
                cluster_key=call.cluster.key,
                cluster_namespace=call.cluster.namespace,
                cluster_name=call.cluster.name,
                moment=moment,
                context=selection.run_context(call),
                message=f"workflow {template.name} is starting",
                deadline_at=now + datetime.timedelta(seconds=deadline) if deadline else None,
                # Due now: if the wake-up message is lost, the reconciler starts it.
                wake_at=now,
            )
    except IntegrityError as exc:
        if _is_run_conflict(exc):
            return None
        raise


def _is_run_conflict(exc: IntegrityError) -> bool:
    """True only for the one-run-per-moment constraint; any other violation is a bug."""
    cause = exc.__cause__
    diag = getattr(cause, "diag", None)
    if diag is not None:
        return getattr(diag, "constraint_name", None) == RUN_CONSTRAINT
    # SQLite (the embedded development database) names the columns instead.
    return "workflows_run.template_name" in str(cause)


def render(run: Run, now: datetime.datetime) -> Answer:
    """The answer one run gives: a pure function of its recorded state and the clock."""
    spec = run.spec
    retry = int(spec.get("retryAfterSeconds", 10))
    name = run.template_name
    if run.released or run.state == Run.State.SUCCEEDED:
        return PROCEED
    if spec.get("holdsLifecycle", True) is False:
        # A background run (add-on removal under RemovePolicies): it never holds CAPI.
        return PROCEED
    past_deadline = run.deadline_exceeded or (
        run.deadline_at is not None and now >= run.deadline_at
    )
    on_deadline = spec.get("onDeadline", "Block")
    if past_deadline and on_deadline == "Proceed":
        return PROCEED
    if past_deadline and on_deadline == "Fail":
        return Answer(catalog.Status.FAILURE, f"workflow {name} did not finish before its deadline")
    if run.state in (Run.State.FAILED, Run.State.CANCELLED):
        if spec.get("onFailure", "Block") == "Fail":
            return Answer(catalog.Status.FAILURE, run.message)
        return Answer(catalog.Status.SUCCESS, run.message, retry)
    if past_deadline:
        return Answer(
            catalog.Status.SUCCESS,
            f"workflow {name} passed its deadline; holding: {run.message}",
            retry,
        )
    return Answer(catalog.Status.SUCCESS, run.message or f"workflow {name} is running", retry)


def combine(answers: Iterable[Answer]) -> Answer:
    """Combine answers the way CAPI combines extensions: any Failure fails; lowest wait wins."""
    answers = list(answers)
    failures = [a for a in answers if a.status == catalog.Status.FAILURE]
    if failures:
        return Answer(catalog.Status.FAILURE, "; ".join(a.message for a in failures))
    waiting = [a for a in answers if a.retry_after > 0]
    if not waiting:
        return PROCEED
    return Answer(
        catalog.Status.SUCCESS,
        "; ".join(a.message for a in waiting),
        min(a.retry_after for a in waiting),
    )


def wake(run_ids: Iterable[int]) -> None:
    """Ask a worker to advance these runs; if the broker is down the reconciler will."""
    from workflows import tasks

    tasks.send_each(
        tasks.advance,
        ((run_id,) for run_id in run_ids),
        action="wake_failed",
        then="the reconciler will start the run",
    )


# --- Worker path ---------------------------------------------------------------------


def advance(run_id: int) -> None:
    """Start `run_id` if it may start, then execute its due steps.

    Each step that may have side effects runs in a transaction of its own; a chain of
    inline steps runs in the scheduling transaction (see `_schedule`).
    """
    while True:
        scheduled = _schedule(run_id)
        if scheduled is None:
            return
        if not isinstance(scheduled, _Again) and not run_step(scheduled, then_advance=False):
            return


def run_step(step_id: int, *, then_advance: bool = True) -> bool:
    """Execute one due step; True if it finished (its run then needs scheduling)."""
    finished, run_id = _execute(step_id)
    if finished and then_advance:
        advance(run_id)
    return finished


class _Again:
    """A chain of inline steps reached INLINE_CHAIN_LIMIT: commit, then schedule again."""


#: Inline steps executed one after another in one transaction, at most.
INLINE_CHAIN_LIMIT = 50


AGAIN = _Again()


def _schedule(run_id: int) -> int | _Again | None:
    """Under the run's lock: start it, promote steps, settle its state, execute one inline step.

    Returns AGAIN when a long chain of inline steps committed part way (the next
    transaction goes on), or a due step for `run_step` to execute in its own
    transaction, or None when nothing is due now.
    """
    to_enqueue: list[int] = []
    inline: int | None = None
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.is_finished:
            return None
        now = clock()
        if run.state == Run.State.PENDING:
            blocker = _start_blocker(run)
            if blocker:
                if blocker != run.message or not run.wake_at or run.wake_at <= now:
                    Run.objects.filter(pk=run.pk).update(
                        message=blocker,
                        wake_at=now + datetime.timedelta(seconds=START_RECHECK_SECONDS),
                    )
                return None
            _run_start(run, now)
        steps = list(run.steps.all())
        passed = run.deadline_at and now >= run.deadline_at and not run.deadline_exceeded
        if passed and _deadline_act(run, steps) and run.is_finished:
            return None
        _promote(steps, now)
        # Inline steps have no side effects, so a chain of them commits as one: were the
        # transaction lost, running them again gives the same outcomes. One commit (one
        # WAL flush) per chain instead of per step; the limit bounds the lock's hold.
        chained = 0
        while chained < INLINE_CHAIN_LIMIT and _execute_inline(run, steps, now):
            chained += 1
            _promote(steps, now)
        _settle(run, steps, now)
        if run.state != Run.State.RUNNING:
            return None
        if chained == INLINE_CHAIN_LIMIT:
            return AGAIN
        due = [s for s in steps if s.state in StepRun.DUE and s.due_at and s.due_at <= now]
        if due:
            inline = due[0].pk
            to_enqueue = [s.pk for s in due[1:]]
        if to_enqueue:
            transaction.on_commit(lambda: _enqueue_steps(to_enqueue))
    return inline


def _execute_inline(run: Run, steps: list[StepRun], now: datetime.datetime) -> bool:
    """Execute the first due inline step (registry.StepType.inline) if its row is free.

    The run's row lock is held, so the step's outcome, the steps it unblocks and the
    run's state commit together. Returns True if the step finished.
    """
    for step in steps:
        if not (step.state in StepRun.DUE and step.due_at and step.due_at <= now):
            continue
        step_type = registry.find(step.type)
        if step_type is None or not step_type.inline:
            continue
        # SKIP LOCKED: a worker executing it from a message holds it (and will wait for
        # this run's lock to schedule the run), so waiting here could deadlock.
        # due_at is checked again on the locked row: the batch poller may have just leased it.
        locked = (
            StepRun.objects.select_for_update(skip_locked=True)
            .filter(pk=step.pk, state__in=StepRun.DUE, due_at__lte=now)
            .values_list("pk", flat=True)
        )
        if not list(locked):
            continue
        finished = _attempt(run, step, now)
        if not finished:
            poll_later(step, now)
        return finished
    return False


def _start_blocker(run: Run) -> str:
    """Why `run` cannot start yet ("" if it can): another workflow, or the concurrency budget."""
    spec = run.spec
    name = run.template_name
    for other in spec.get("waitFor") or []:
        runs = Run.objects.filter(cluster_key=run.cluster_key, template_name=other)
        if runs.filter(state__in=Run.ACTIVE).exists():
            return f"workflow {name} is waiting for workflow {other} to finish"
        # A run that holds the lifecycle keeps the order even past a failure: removing an
        # add-on while what depends on it failed to go would break the dependent. A run
        # that holds nothing (best effort) goes on. Only the latest run counts, so an old
        # failure that a later run made good does not block.
        latest = runs.order_by("-pk").values_list("state", "released").first()
        if (
            spec.get("holdsLifecycle", True)
            and latest is not None
            and latest[0] in (Run.State.FAILED, Run.State.CANCELLED)
            and not latest[1]
        ):
            return (
                f"workflow {name} is waiting for workflow {other}, which {latest[0]}; "
                f"retry or release it"
            )
    limit = spec.get("concurrency")
    if limit:
        _lock_budget(name)
        running = Run.objects.filter(template_name=name, state=Run.State.RUNNING).count()
        if running >= limit:
            return f"workflow {name} is waiting for a free slot (at most {limit} at once)"
    return ""


def _lock_budget(template_name: str) -> None:
    """Serialise one template's starts: two workers never both take the last slot."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", [f"budget:{template_name}"]
            )
    # SQLite serialises every write transaction already.


def _run_start(run: Run, now: datetime.datetime) -> None:
    steps = run.spec.get("steps") or []
    StepRun.objects.bulk_create(
        [
            StepRun(
                run=run,
                name=s["name"],
                position=i,
                type=s["type"],
                params=s.get("with") or {},
                depends_on=s.get("dependsOn") or [],
                timeout_seconds=s.get("timeoutSeconds") or _default_timeout(s["type"]),
                retries=s.get("retries", 0),
            )
            for i, s in enumerate(steps)
        ],
        ignore_conflicts=True,
    )
    transitions.run_move(
        run,
        Run.State.RUNNING,
        allowed_from=[Run.State.PENDING],
        message=f"workflow {run.template_name} is running",
        started_at=now,
    )
    logger.info("run started", extra={"action": "run_started", **log_fields(run)})
    _announce(run.pk, "started")


def _default_timeout(type_name: str) -> int | None:
    step_type = registry.find(type_name)
    return step_type.default_timeout_seconds if step_type else None


def _promote(steps: list[StepRun], now: datetime.datetime) -> None:
    states = {s.name: s.state for s in steps}
    for step in steps:
        if step.state == StepRun.State.PENDING and all(
            states.get(dep) in StepRun.DONE for dep in step.depends_on
        ):
            transitions.step_move(
                step, StepRun.State.READY, allowed_from=[StepRun.State.PENDING], due_at=now
            )
            states[step.name] = step.state


def _settle(run: Run, steps: list[StepRun], now: datetime.datetime) -> None:
    """Finish the run when its steps say so; otherwise record what it is doing."""
    name = run.template_name
    failed = next((s for s in steps if s.state == StepRun.State.FAILED), None)
    if failed is not None:
        message = (
            f"workflow {name} failed at step {failed.name}: {failed.message}; "
            f"retry it with `manage.py workflows retry {run.pk} --step {failed.name}`"
        )
        transitions.run_move(
            run, Run.State.FAILED, allowed_from=[Run.State.RUNNING], message=message[:500]
        )
        logger.warning("run failed", extra={"action": "run_failed", **log_fields(run)})
        _announce(run.pk, "failed")
        _wake_waiters(run)
        return
    if all(s.state in StepRun.DONE for s in steps):
        transitions.run_move(run, Run.State.SUCCEEDED, allowed_from=[Run.State.RUNNING], message="")
        logger.info("run succeeded", extra={"action": "run_succeeded", **log_fields(run)})
        _announce(run.pk, "succeeded")
        _wake_waiters(run)
        return
    current = next((s for s in steps if s.state in StepRun.DUE), None)
    if current is None:
        message = f"workflow {name} is running"
    elif current.type == "approval" and current.state == StepRun.State.WAITING:
        message = f"workflow {name} is waiting for approval at step {current.name}"
    else:
        message = f"workflow {name} is running step {current.name}"
    # Due steps are the reconciler's to find by their own due_at (a lost countdown), so
    # a running run needs waking only for its deadline: polls never touch the run's row,
    # and the reconciler never sends a run and its step the same message.
    wake_at = run.deadline_at if run.deadline_at and not run.deadline_exceeded else None
    if message != run.message or wake_at != run.wake_at:
        Run.objects.filter(pk=run.pk).update(message=message, wake_at=wake_at)
        run.message, run.wake_at = message, wake_at


def _deadline_act(run: Run, steps: list[StepRun]) -> bool:
    """The deadline passed: Fail ends the run; Block and Proceed are recorded and alerted.

    False if a step Fail would cancel is executing now: its worker holds the step's lock
    and takes the run's next, so waiting for it here would deadlock. The run stays due
    (its wake-up is the passed deadline) and the reconciler brings it back.
    """
    action = run.spec.get("onDeadline", "Block")
    unfinished = [s.pk for s in steps if s.state not in StepRun.FINISHED]
    if action == "Fail" and unfinished:
        free = StepRun.objects.select_for_update(skip_locked=True).filter(pk__in=unfinished)
        if len(free.values_list("pk", flat=True)) < len(unfinished):
            logger.info(
                "deadline action waits for an executing step",
                extra={"action": "run_deadline_deferred", **log_fields(run)},
            )
            return False
    Run.objects.filter(pk=run.pk).update(deadline_exceeded=True)
    run.deadline_exceeded = True
    transitions.action_record(
        run,
        "deadline",
        actor="hooksvc",
        reason=f"onDeadline: {action}",
        message=f"workflow {run.template_name} did not finish before its deadline",
    )
    logger.warning(
        "run passed its deadline",
        extra={"action": "run_deadline", "on_deadline": action, **log_fields(run)},
    )
    if action == "Fail":
        for step in steps:
            if step.state not in StepRun.FINISHED:
                transitions.step_move(
                    step, StepRun.State.CANCELLED, allowed_from=[step.state], record=False
                )
        cleanups.after_cancel(s for s in steps if s.state == StepRun.State.CANCELLED)
        transitions.run_move(
            run,
            Run.State.FAILED,
            allowed_from=[Run.State.RUNNING],
            message=f"workflow {run.template_name} did not finish before its deadline",
        )
        _announce(run.pk, "failed")
        _wake_waiters(run)
    return True


def _announce(run_id: int, outcome: str) -> None:
    """After the transition commits, a worker records it as an Event on the Cluster."""

    def send() -> None:
        from workflows import tasks

        # Best effort: an Event is worth less than the run's own progress.
        tasks.send_each(
            tasks.cluster_event,
            [(run_id, outcome)],
            action="event_enqueue_failed",
            then="cluster event not sent",
        )

    transaction.on_commit(send)


def _wake_waiters(run: Run) -> None:
    """A finished run frees a budget slot and may be what another run waits for.

    Only a template with a concurrency budget has runs waiting for a slot; without one,
    its pending runs are not waiting for this run and already have their own wake-up.
    """
    waiting: list[int] = []
    if run.spec.get("concurrency"):
        waiting += Run.objects.filter(
            state=Run.State.PENDING, template_name=run.template_name
        ).values_list("pk", flat=True)[:10]
    waiting += Run.objects.filter(state=Run.State.PENDING, cluster_key=run.cluster_key).values_list(
        "pk", flat=True
    )[:10]
    if waiting:
        transaction.on_commit(lambda: wake(sorted(set(waiting))))


#: The columns the countdown path reads: a narrow row is cheaper to build and to parse
#: (a poll is mostly this query), and the run's spec can be large.
_EXECUTE_FIELDS = (
    *(
        f.name
        for f in StepRun._meta.concrete_fields
        if f.name not in ("position", "depends_on", "finished_at")
    ),
    *(f"run__{f}" for f in ("state", "context", "hook", "cluster_namespace", "cluster_name")),
    "run__template_name",
)


def _execute(step_id: int) -> tuple[bool, int]:
    """Execute one due step under its row lock and record the outcome.

    The run is read, not locked: a step that polls again changes only its own row.
    """
    with transaction.atomic():
        found = list(
            StepRun.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("run")
            .only(*_EXECUTE_FIELDS)
            .filter(pk=step_id, state__in=StepRun.DUE)
            .order_by()[:1]
        )
        if not found:
            return False, 0
        step = found[0]
        run = step.run
        now = clock()
        if run.state != Run.State.RUNNING or (step.due_at and step.due_at > now):
            return False, run.pk
        finished = _attempt(run, step, now)
        after_attempt(run, step, finished, now)
    return finished, run.pk


def after_attempt(run: Run, step: StepRun, finished: bool, now: datetime.datetime) -> None:
    """Inside the step's transaction: a finished step makes its run due, else it polls later."""
    if finished:
        # Due now: if this worker dies before it schedules the run, the reconciler will.
        Run.objects.filter(pk=run.pk).update(wake_at=now)
    else:
        poll_later(step, now)


def needs_countdown(state: str, after: float) -> bool:
    """A retry and a short wait get a countdown message; a long wait is the batch poller's.

    Batched polls (workflows.polls) find waiting steps by their due_at, which saves a
    message per poll but adds up to a beat period of latency: worth it only for long waits.
    """
    return state != StepRun.State.WAITING or after < settings.POLL_BATCH_MIN_WAIT_SECONDS


def poll_later(step: StepRun, now: datetime.datetime) -> None:
    """After commit, send the countdown of a step that is due again (unless batched)."""
    if step.due_at is None or step.state not in StepRun.DUE:
        return
    after = max(0.0, (step.due_at - now).total_seconds())
    if needs_countdown(step.state, after):
        transaction.on_commit(functools.partial(enqueue_poll, step.pk, after))


def _attempt(run: Run, step: StepRun, now: datetime.datetime) -> bool:
    """Call the step's function once (its row is locked) and record the outcome."""
    ctx, outcome, started = call(run, step, now)
    return conclude(run, step, ctx, outcome, started=started, now=now)


def call(
    run: Run, step: StepRun, now: datetime.datetime
) -> tuple[registry.StepContext, registry.Outcome | errors.StepError, datetime.datetime]:
    """Call the step's function once, or time it out; returns its context (memo), outcome, start."""
    started = step.started_at or now
    ctx = registry.StepContext.of(run, step)
    if step.timeout_seconds and now - started > datetime.timedelta(seconds=step.timeout_seconds):
        outcome: registry.Outcome | errors.StepError = errors.PermanentError(
            f"timed out after {step.timeout_seconds} s"
        )
    else:
        outcome = execute_once(ctx, log_fields(run, step))
    return ctx, outcome, started


def conclude(
    run: Run,
    step: StepRun,
    ctx: registry.StepContext,
    outcome: registry.Outcome | errors.StepError,
    *,
    started: datetime.datetime,
    now: datetime.datetime,
) -> bool:
    """With the step's row locked: clean up after a final failure, record the outcome.

    Returns True if the step finished.
    """
    fields = log_fields(run, step)
    if isinstance(outcome, errors.StepError) and (
        isinstance(outcome, errors.PermanentError) or step.failures + 1 > step.retries
    ):
        _cleanup(ctx, fields)
    return _record(step, outcome, memo=ctx.memo, started=started, now=now, fields=fields)


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
        # The class name only: the exception text may hold hosts, tokens or timestamps.
        return errors.TemporaryError(f"unexpected error ({type(exc).__name__}); see hooksvc logs")


def _cleanup(ctx: registry.StepContext, fields: dict[str, Any]) -> None:
    """The step is about to fail for good: let its type delete what it created (best effort)."""
    step_type = registry.find(ctx.step_type)
    if step_type is None or step_type.cleanup is None:
        return
    try:
        step_type.cleanup(ctx)
    except Exception:
        # The failure is recorded either way; what is left behind is named in the log.
        logger.warning(
            "step cleanup failed", extra={"action": "step_cleanup_failed", **fields}, exc_info=True
        )


def _record(
    step: StepRun,
    outcome: registry.Outcome | errors.StepError,
    *,
    memo: dict[str, Any],
    started: datetime.datetime,
    now: datetime.datetime,
    fields: dict[str, Any],
) -> bool:
    if isinstance(outcome, registry.Poll) and step.state == StepRun.State.WAITING:
        _record_poll(step, outcome, memo, now)
        return False
    common: dict[str, Any] = {"memo": memo, "started_at": started}
    extra: dict[str, Any] = {}
    if isinstance(outcome, registry.Done):
        transitions.step_move(
            step,
            StepRun.State.SUCCEEDED,
            allowed_from=StepRun.DUE,
            output=dict(outcome.output),
            message="",
            **common,
        )
        logger.info("step succeeded", extra={"action": "step_succeeded", **fields})
        _observe(step, now - started, failed=False)
        return True
    if isinstance(outcome, registry.Poll):
        if outcome.output is not None:
            extra["output"] = dict(outcome.output)
        transitions.step_move(
            step,
            StepRun.State.WAITING,
            allowed_from=StepRun.DUE,
            due_at=now + datetime.timedelta(seconds=max(0.0, outcome.after)),
            message=outcome.message[:500],
            **common,
            **extra,
        )
        return False
    failures = step.failures + 1
    message = outcome.message[:500]
    if outcome.output is not None:
        common["output"] = dict(outcome.output)
    if isinstance(outcome, errors.TemporaryError) and failures <= step.retries:
        delay = outcome.delay if outcome.delay is not None else backoff(failures)
        transitions.step_move(
            step,
            StepRun.State.READY,
            allowed_from=StepRun.DUE,
            due_at=now + datetime.timedelta(seconds=delay),
            failures=failures,
            message=message,
            **common,
        )
        logger.warning(
            "step will be retried", extra={"action": "step_retry", "error": message, **fields}
        )
        return False
    transitions.step_move(
        step,
        StepRun.State.FAILED,
        allowed_from=StepRun.DUE,
        failures=failures,
        message=message,
        **common,
    )
    logger.warning("step failed", extra={"action": "step_failed", "error": message, **fields})
    _observe(step, now - started, failed=True)
    return True


def poll_changes(
    step: StepRun, outcome: registry.Poll, memo: dict[str, Any], now: datetime.datetime
) -> dict[str, Any]:
    """The columns a repeated poll changes: the next due time, and what differs from the row.

    The countdown path and the batch poller (workflows.polls) both write exactly these.
    """
    changes: dict[str, Any] = {
        "due_at": now + datetime.timedelta(seconds=max(0.0, outcome.after)),
    }
    if memo != step.memo:
        changes["memo"] = memo
    message = outcome.message[:500]
    if message != step.message:
        changes["message"] = message
    if outcome.output is not None and dict(outcome.output) != step.output:
        changes["output"] = dict(outcome.output)
    if step.started_at is None:
        changes["started_at"] = now
    return changes


def _record_poll(
    step: StepRun, outcome: registry.Poll, memo: dict[str, Any], now: datetime.datetime
) -> None:
    """A waiting step polls again: one UPDATE of its own row, nothing else.

    Only what changed is written, and the commit does not wait for the disk
    (PostgreSQL's asynchronous commit, this transaction only): a crash may lose the last
    polls' records, and the step is then polled again, which steps must allow anyway.
    """
    changes = poll_changes(step, outcome, memo, now)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
    transitions.step_move(
        step, StepRun.State.WAITING, allowed_from=[StepRun.State.WAITING], **changes
    )


def _observe(step: StepRun, took: datetime.timedelta, *, failed: bool) -> None:
    """Count a finished step once its transaction commits: a rolled-back one did not finish."""
    step_type, seconds = step.type, took.total_seconds()
    transaction.on_commit(
        lambda: metrics.step_finished(step_type=step_type, seconds=seconds, failed=failed)
    )


def backoff(failures: int) -> float:
    """Seconds before attempt `failures + 1`: exponential, capped, with full jitter."""
    cap = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (failures - 1))
    return max(0.5, jitter(cap))


def _enqueue_steps(step_ids: Iterable[int]) -> None:
    from workflows import tasks

    tasks.send_each(
        tasks.run_step,
        ((step_id,) for step_id in step_ids),
        action="enqueue_failed",
        then="the reconciler will run the step",
    )


def enqueue_poll(step_id: int, after: float) -> None:
    from workflows import tasks

    tasks.send_each(
        tasks.run_step,
        [(step_id,)],
        action="enqueue_failed",
        then="the reconciler will poll the step",
        countdown=after,
    )


def log_fields(run: Run, step: StepRun | None = None) -> dict[str, Any]:
    """The fields every log line about a run carries."""
    fields: dict[str, Any] = {
        "run": run.pk,
        "hook": run.hook,
        "cluster": f"{run.cluster_namespace}/{run.cluster_name}",
        "template": run.template_name,
    }
    if step is not None:
        fields["step"] = step.name
    return fields


# --- Reconciler ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ReconcileReport:
    runs: int
    steps: int


def reconcile(limit: int = 5000) -> ReconcileReport:
    """Re-enqueue runs and steps whose wake-up is overdue (a lost message, a killed worker).

    One indexed query per kind. A run is due when it must be scheduled (new, waiting to
    start, a step just finished, its deadline); a due ready step (a lost countdown) is sent
    on its own, unless its run is sent in the same pass. Due waiting steps are left to the
    batch poller (workflows.polls), which claims every one of them, lost countdown or not:
    a message for them too would only race the batch for the same poll.
    """
    from workflows import tasks

    now = clock()
    # Work is left alone until it is this late, so the reconciler never races the countdowns.
    late = now - datetime.timedelta(seconds=settings.RECONCILE_GRACE_SECONDS)
    with transaction.atomic():
        run_ids = list(
            Run.objects.select_for_update(skip_locked=True)
            .filter(state__in=Run.ACTIVE, wake_at__lte=late)
            .order_by("wake_at")
            .values_list("pk", flat=True)[:limit]
        )
        # New runs are due at once, without the grace: their wake-up may never have been sent.
        run_ids += list(
            Run.objects.filter(state=Run.State.PENDING, started_at__isnull=True, wake_at__lte=now)
            .exclude(pk__in=run_ids)
            .values_list("pk", flat=True)[:limit]
        )
        Run.objects.filter(pk__in=run_ids).update(
            wake_at=now + datetime.timedelta(seconds=RECONCILE_REQUEUE_SECONDS)
        )
    # A run's `advance` executes its due steps, so the steps of a run sent above are not
    # sent again (it would only be a second message for the same work).
    step_ids = list(
        StepRun.objects.filter(
            state=StepRun.State.READY, due_at__lte=late, run__state=Run.State.RUNNING
        )
        .exclude(run_id__in=run_ids)
        .order_by("due_at")
        .values_list("pk", flat=True)[:limit]
    )
    for run_id in run_ids:
        tasks.advance.delay(run_id)
    for step_id in step_ids:
        tasks.run_step.delay(step_id)
    if run_ids or step_ids:
        logger.info(
            "reconciler re-enqueued overdue work",
            extra={"action": "reconciled", "runs": len(run_ids), "steps": len(step_ids)},
        )
    return ReconcileReport(runs=len(run_ids), steps=len(step_ids))
