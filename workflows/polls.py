"""Batched polls: a worker claims due waiting steps together and polls them in one go.

A waiting step due at least POLL_BATCH_MIN_WAIT_SECONDS ahead gets no countdown message
(engine.needs_countdown); beat's `workflows.poll_due` finds it by its due_at instead. A
batch claims up to POLL_BATCH_SIZE due steps in one statement that moves their due_at to
a lease (now + POLL_LEASE_SECONDS) and commits: countdowns, the run's scheduling, other
batches and the reconciler then leave them alone, and a worker killed mid-batch only
delays them until the lease passes. Each step's function is called without a lock held;
the repeated polls are written back in one statement, only where the row still carries
this batch's lease (an operator's approve, skip or cancel wins). Any other outcome (done,
failure, retry, timeout) goes through the engine's locked per-step path, as a countdown's.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from workflows import engine, errors
from workflows.models import Run, StepRun
from workflows.steps import registry

logger = logging.getLogger(__name__)

#: The step and run columns a poll needs: the run's spec (large) is not read.
_STEP_COLUMNS = (
    "id",
    "run_id",
    "name",
    "type",
    "params",
    "timeout_seconds",
    "retries",
    "failures",
    "started_at",
    "memo",
    "output",
    "message",
)
_RUN_COLUMNS = ("context", "hook", "cluster_namespace", "cluster_name", "template_name")
_JSON_COLUMNS = frozenset({"params", "memo", "output", "context"})


@dataclasses.dataclass(frozen=True)
class BatchReport:
    claimed: int
    polled: int
    finished: int


@dataclasses.dataclass(frozen=True)
class _Write:
    """A repeated poll to write back; None leaves a column as it is."""

    step_id: int
    due_at: datetime.datetime
    memo: dict[str, Any] | None = None
    message: str | None = None
    output: dict[str, Any] | None = None
    started_at: datetime.datetime | None = None
    #: Seconds to the next poll, from the poll's own time.
    after: float = 0.0


def poll_due(limit: int | None = None) -> BatchReport:
    """Claim up to `limit` due waiting steps of running runs, poll each once, record it."""
    limit = limit or settings.POLL_BATCH_SIZE
    now = engine.clock()
    lease_seconds = settings.POLL_LEASE_SECONDS
    lease = now + datetime.timedelta(seconds=lease_seconds)
    steps = claim(now=now, lease=lease, limit=limit)
    if len(steps) >= limit:
        # More may be due: another worker process takes the next batch meanwhile.
        _enqueue_batch()
    # Past half the lease, the rest is handed back (due now): a slow batch does not start
    # polls whose lease is about to pass, when another batch may claim them too.
    stop_at = now + datetime.timedelta(seconds=lease_seconds / 2)
    writes: list[_Write] = []
    handed_back: list[_Write] = []
    others: list[tuple[StepRun, registry.StepContext, errors.StepError | registry.Done]] = []
    started_at: dict[int, datetime.datetime] = {}
    polled = 0
    for step in steps:
        at = engine.clock()
        if at >= stop_at:
            handed_back.append(_Write(step.pk, due_at=at))
            continue
        polled += 1
        ctx, outcome, started = engine.call(step.run, step, at)
        started_at[step.pk] = started
        if isinstance(outcome, registry.Poll):
            writes.append(_poll_write(step, ctx.memo, outcome, at))
        else:
            others.append((step, ctx, outcome))
    _write_back([*writes, *handed_back], lease=lease)
    _countdowns(writes, now=engine.clock())
    finished = 0
    for step, ctx, outcome in others:
        finished += _finish(step, ctx, outcome, started=started_at[step.pk], lease=lease)
    if steps:
        logger.debug(
            "batch polled",
            extra={"action": "poll_batch", "claimed": len(steps), "polled": polled},
        )
    return BatchReport(claimed=len(steps), polled=polled, finished=finished)


def claim(*, now: datetime.datetime, lease: datetime.datetime, limit: int) -> list[StepRun]:
    """Lease up to `limit` due waiting steps of running runs (most overdue first) and commit.

    PostgreSQL: one statement; SKIP LOCKED passes over rows a countdown or another batch
    holds, and the lease then keeps them from everyone else. SQLite (`make run`) has no
    row locks but serialises writers, so a select and a guarded update do the same.
    """
    if connection.vendor == "postgresql":
        rows = _claim_postgresql(now=now, lease=lease, limit=limit)
    else:
        rows = _claim_portable(now=now, lease=lease, limit=limit)
    return [_step(row, lease) for row in rows]


#: One statement: lease the due rows (SKIP LOCKED) and return what their polls need.
_CLAIM_SQL = """
    UPDATE workflows_steprun AS s SET due_at = %s
    FROM workflows_run AS r
    WHERE r.id = s.run_id AND s.id IN (
        SELECT c.id FROM workflows_steprun AS c JOIN workflows_run AS cr ON cr.id = c.run_id
        WHERE c.state = %s AND c.due_at <= %s AND cr.state = %s
        ORDER BY c.due_at
        LIMIT %s
        FOR UPDATE OF c SKIP LOCKED
    )
    RETURNING s.id, s.run_id, s.name, s.type, s.params, s.timeout_seconds, s.retries,
        s.failures, s.started_at, s.memo, s.output, s.message,
        r.context, r.hook, r.cluster_namespace, r.cluster_name, r.template_name
"""


def _claim_postgresql(
    *, now: datetime.datetime, lease: datetime.datetime, limit: int
) -> list[dict[str, Any]]:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, [lease, StepRun.State.WAITING, now, Run.State.RUNNING, limit])
        names = [*_STEP_COLUMNS, *_RUN_COLUMNS]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _claim_portable(
    *, now: datetime.datetime, lease: datetime.datetime, limit: int
) -> list[dict[str, Any]]:
    with transaction.atomic():
        ids = list(
            StepRun.objects.filter(
                state=StepRun.State.WAITING, due_at__lte=now, run__state=Run.State.RUNNING
            )
            .order_by("due_at")
            .values_list("pk", flat=True)[:limit]
        )
        StepRun.objects.filter(pk__in=ids, state=StepRun.State.WAITING, due_at__lte=now).update(
            due_at=lease
        )
        rows = StepRun.objects.filter(pk__in=ids, due_at=lease).values(
            *_STEP_COLUMNS, *(f"run__{c}" for c in _RUN_COLUMNS)
        )
        return [{k.removeprefix("run__"): v for k, v in row.items()} for row in rows]


def _step(row: dict[str, Any], lease: datetime.datetime) -> StepRun:
    """A StepRun (with its run) built from a claimed row, as the engine's functions take it."""
    row = {k: engine.decode_json(v) if k in _JSON_COLUMNS else v for k, v in row.items()}
    run = Run(id=row["run_id"], state=Run.State.RUNNING, **{c: row[c] for c in _RUN_COLUMNS})
    step = StepRun(
        **{c: row[c] for c in _STEP_COLUMNS if c != "run_id"},
        state=StepRun.State.WAITING,
        due_at=lease,
    )
    step.run = run
    return step


def _poll_write(
    step: StepRun, memo: dict[str, Any], outcome: registry.Poll, now: datetime.datetime
) -> _Write:
    """What a repeated poll changes (engine.poll_changes), unchanged columns left None."""
    return _Write(
        step.pk, after=max(0.0, outcome.after), **engine.poll_changes(step, outcome, memo, now)
    )


def _write_back(writes: Sequence[_Write], *, lease: datetime.datetime) -> None:
    """Every repeated poll in one statement, only where the row still carries this lease.

    Asynchronous commit, as engine._record_poll: a crash may lose the last polls, and the
    steps are then polled again, which steps must allow anyway.
    """
    if not writes:
        return
    with transaction.atomic():
        if connection.vendor != "postgresql":
            for w in writes:
                changes = {
                    k: v
                    for k, v in dataclasses.asdict(w).items()
                    if k not in ("step_id", "after") and v is not None
                }
                StepRun.objects.filter(
                    pk=w.step_id, state=StepRun.State.WAITING, due_at=lease
                ).update(**changes)
            return
        columns: list[list[Any]] = [[], [], [], [], [], []]
        for w in writes:
            row = (
                w.step_id,
                w.due_at,
                None if w.memo is None else json.dumps(w.memo),
                w.message,
                None if w.output is None else json.dumps(w.output),
                w.started_at,
            )
            for column, value in zip(columns, row, strict=True):
                column.append(value)
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
            cursor.execute(_WRITE_BACK_SQL, [*columns, StepRun.State.WAITING, lease])


#: Every repeated poll of a batch in one statement; a NULL leaves the column as it is.
_WRITE_BACK_SQL = """
    UPDATE workflows_steprun AS s SET
        due_at = v.due_at,
        memo = COALESCE(v.memo, s.memo),
        message = COALESCE(v.message, s.message),
        output = COALESCE(v.output, s.output),
        started_at = COALESCE(s.started_at, v.started_at)
    FROM unnest(
        %s::bigint[], %s::timestamptz[], %s::jsonb[], %s::varchar[], %s::jsonb[],
        %s::timestamptz[]
    ) AS v(id, due_at, memo, message, output, started_at)
    WHERE s.id = v.id AND s.state = %s AND s.due_at = %s
"""


def _countdowns(writes: Sequence[_Write], *, now: datetime.datetime) -> None:
    """A step whose next poll is soon gets its countdown, as after engine._execute."""
    for w in writes:
        if engine.needs_countdown(StepRun.State.WAITING, w.after):
            engine.enqueue_poll(w.step_id, max(0.0, (w.due_at - now).total_seconds()))


def _finish(
    step: StepRun,
    ctx: registry.StepContext,
    outcome: errors.StepError | registry.Done,
    *,
    started: datetime.datetime,
    lease: datetime.datetime,
) -> bool:
    """Record a non-repeat outcome under the step's row lock, then advance its run.

    Only if the row still carries this batch's lease: otherwise an operator (or, after
    the lease expired, another poll) moved it on, and this outcome is not recorded.
    """
    now = engine.clock()
    run = step.run
    with transaction.atomic():
        locked = list(
            StepRun.objects.select_for_update(skip_locked=True)
            .filter(pk=step.pk, state=StepRun.State.WAITING, due_at=lease)
            .values_list("pk", flat=True)
        )
        if not locked:
            return False
        finished = engine.conclude(run, step, ctx, outcome, started=started, now=now)
        engine.after_attempt(run, step, finished, now)
    if finished:
        engine.advance(run.pk)
    return finished


def _enqueue_batch() -> None:
    from workflows import tasks

    tasks.send_each(
        tasks.poll_due, [()], action="enqueue_failed", then="beat will start the next batch"
    )
