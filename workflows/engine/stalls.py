"""Stalls: a due step that has made no progress for longer than its type says is normal.

Progress is a change of what the step reports while it is due (ready or waiting) and not
within a streak of failed attempts: its state, its message or its output. A trigger of the
step table records it (`progress_at`, migration 0015_step_stalls) on change only, so a poll
that reports the same costs no write, and every writer of a step's row counts alike. An
error is no progress, nor is the poll after it that reports what the step reported before.
This is not the error budget's "progress" (workflows.engine.lifecycle: any successful poll
ends a streak of failures): a Job polled every 10 s for an hour with the same "1 active"
keeps its budget whole but makes no progress here.

Each step gets its bound when its run starts (workflows.engine.lifecycle.created: its type's
StepType.stall_seconds, docs/stalls.md lists the built-in ones; 0: never stalled). A step
that waits for a person never stalls: it shows as awaiting approval, and its run's
deadline bounds it. Everything below reads the whole fleet in one query: `where` (steps),
`of_runs` and `annotate` (runs), `by_type` (the hooksvc_steps_stalled gauge); `notice`
(the reconciler's pass, workflows.tasks) sends one Warning Event on the Cluster per new
stall; `describe` is what `workflows why`, a run's page and the API say of one step, and
`wording` how each of them puts it in words.

Times: `progress_at` is on the database's clock (the trigger's statement_timestamp()), as
worker heartbeats are, and so are the reconciler's pass and the gauge (`now` None: SQL's
now()); a page or `workflows why` passes its own now. Hosts agree to well under the minutes
these bounds are.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from django.db import transaction
from django.db.models import (
    Count,
    DateTimeField,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    Func,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Coalesce, Now
from django.db.models.lookups import LessThan

from workflows import durations
from workflows.engine import dispatch, stepstate
from workflows.models import Run, StepRun
from workflows.steps import registry

logger = logging.getLogger(__name__)

#: What `dispatch.cluster_event` announces for a new stall (workflows.kube.events).
STALLED = "stalled"
#: At most this many new stalls are announced per pass; the rest on the next.
NOTICE_LIMIT = 500


class _Seconds(Func):
    """An interval of so many seconds (PostgreSQL's make_interval)."""

    template = "make_interval(secs => %(expressions)s)"
    output_field = DurationField()


def _since() -> Coalesce:
    # Steps made before migration 0015 have no progress time yet: from their start.
    return Coalesce(F("progress_at"), F("started_at"), F("due_at"))


def _bound() -> Coalesce:
    # Steps made before migration 0015 have no bound of their own: the registry's default.
    return Coalesce(F("stall_seconds"), Value(registry.DEFAULT_STALL_SECONDS))


def bound(step: StepRun) -> int:
    """`step`'s normal bound in seconds (0: never stalled), as `_bound` reads it in SQL."""
    return registry.DEFAULT_STALL_SECONDS if step.stall_seconds is None else step.stall_seconds


def _stalls_at() -> ExpressionWrapper[CombinedExpression]:
    """When a step without further progress shows as stalled."""
    return ExpressionWrapper(_since() + _Seconds(_bound()), output_field=DateTimeField())


def _at(now: datetime.datetime | None) -> Value | Now:
    # None: the database's own clock, the one progress_at is written on.
    return Now() if now is None else Value(now, output_field=DateTimeField())


def where(now: datetime.datetime | None = None) -> Q:
    """Steps stalled at `now` (None: the database's now), their run's state aside: callers
    that need it add it."""
    return (
        Q(state__in=StepRun.DUE, waits_for_person=False)
        & ~Q(stall_seconds=0)
        & Q(LessThan(_stalls_at(), _at(now)))
    )


def steps(now: datetime.datetime | None = None) -> QuerySet[StepRun]:
    """The steps of running runs that are stalled at `now` (None: the database's now)."""
    return StepRun.objects.filter(where(now), run__state=Run.State.RUNNING)


def of_runs(now: datetime.datetime) -> Exists:
    """For a run (as OuterRef), whether one of its steps is stalled at `now`."""
    return Exists(StepRun.objects.filter(where(now), run=OuterRef("pk")))


def annotate(runs: QuerySet[Run], now: datetime.datetime) -> QuerySet[Run]:
    """`runs` with `stalled_step` (the name of its first stalled step, or None),
    `stalled_since` (when that step last made progress) and `stalled_normal` (its bound)."""
    found = (
        StepRun.objects.filter(where(now), run=OuterRef("pk"))
        .annotate(since=_since(), normal=_bound())
        .order_by("position")
    )
    return runs.annotate(
        stalled_step=Subquery(found.values("name")[:1]),
        stalled_since=Subquery(found.values("since")[:1]),
        stalled_normal=Subquery(found.values("normal")[:1]),
    )


def of_annotated(run: Run, now: datetime.datetime) -> dict[str, Any] | None:
    """What a run from `annotate` says of its stalled step; None when none is stalled."""
    name = getattr(run, "stalled_step", None)
    since = getattr(run, "stalled_since", None)
    if not name or since is None:
        return None
    return {
        "step": name,
        "since": since.isoformat(timespec="seconds"),
        "for": durations.span((now - since).total_seconds()),
        "normal": durations.span(getattr(run, "stalled_normal", None) or 0),
    }


def wording(step: str, quiet_for: str, normal: str) -> str:
    """How every page and command says a stall: "step conformance stalled: no progress for
    47 min (normal: up to 30 min)" (the fleet, a run's page, `workflows why`)."""
    return f"step {step} stalled: no progress for {quiet_for} (normal: up to {normal})"


def by_type(now: datetime.datetime | None = None) -> dict[str, int]:
    """How many steps of running runs are stalled at `now`, by step type: every type with a
    due step, zeros included, so that a gauge's series does not vanish (one query)."""
    rows = (
        StepRun.objects.filter(state__in=StepRun.DUE, run__state=Run.State.RUNNING)
        .order_by()
        .values("type")
        .annotate(n=Count("pk", filter=where(now)))
    )
    return {row["type"]: int(row["n"]) for row in rows}


def describe(step: StepRun, now: datetime.datetime) -> dict[str, Any] | None:
    """What `workflows why` and the API say of a stalled `step`; None when it is not."""
    if step.state not in StepRun.DUE or step.waits_for_person:
        return None
    normal = bound(step)
    since = step.progress_at or step.started_at or step.due_at
    if not normal or since is None:
        return None
    quiet = (now - since).total_seconds()
    if quiet <= normal:
        return None
    return {
        "since": since.isoformat(timespec="seconds"),
        "for": durations.span(quiet),
        "normal": durations.span(normal),
        # Each step type says what it waits for in its message ("Job ns/x: 1 active").
        "waitsFor": step.message,
    }


def message(step: StepRun, run: Run) -> str:
    """The Event's text: deterministic (no times), so a repeat bumps the same Event."""
    normal = bound(step)
    moment = f" {run.moment}" if run.moment else ""
    waits = step.message or "it reports nothing"
    return (
        f"workflow {run.template_name} for {run.hook}{moment}: step {step.name} ({step.type})"
        f" has made no progress for longer than its normal {durations.span(normal)}: {waits}"
    )


def notice(now: datetime.datetime | None = None, limit: int = NOTICE_LIMIT) -> int:
    """Announce each stall not announced yet (a Warning Event on its Cluster, after the
    commit); the number announced. A stall is new when its step made progress since the
    last one was announced: one write per stall, none per pass while it lasts. `now` None
    (the reconciler's pass): the database's clock, on which progress_at is written."""
    new = Q(stall_noticed_at__isnull=True) | Q(stall_noticed_at__lt=_since())
    with transaction.atomic():
        found = list(
            steps(now)
            .filter(new)
            .select_related("run")
            .select_for_update(skip_locked=True, of=("self",))
            .order_by("pk")[:limit]
        )
        if not found:
            return 0
        stepstate.note_stalls([s.pk for s in found], _at(now))
        for step in found:
            dispatch.cluster_event(step.run_id, STALLED, message(step, step.run))
    for step in found:
        logger.warning(
            "step stalled",
            extra={
                "action": "step_stalled",
                "run": step.run_id,
                "step": step.name,
                "type": step.type,
                "cluster": f"{step.run.cluster_namespace}/{step.run.cluster_name}",
            },
        )
    return len(found)
