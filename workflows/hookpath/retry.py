"""retryAfterSeconds from what the engine knows: the time until a run's state can next change.

Since Cluster API v1.12 the topology controller caches a blocking hook's answer per Cluster and
hook until its `retryAfterSeconds` runs out, and does not call again before then, whatever
else happens (kubernetes-sigs/cluster-api `util/cache/cache.go` HookEntry.ShouldRequeue;
`exp/topology/desiredstate/lifecycle_hooks.go`, `core/reconcilers/topology/cluster/
cluster_controller.go` and `reconcile_state.go` add the entry at `time.Now() +
retryAfterSeconds`). A fixed answer therefore holds the cluster up to that long after the work
is done. This module answers with the time until the run's recorded state can next change:
a `wait` step's end or a waiting step's next poll (its `due_at`), a retry's backoff (a ready
step's `due_at`), a step's timeout, the run's deadline, or a pending run's next start check;
plus a margin for the engine to act, rounded up to whole seconds, never above the
template's `retryAfterSeconds` and never below 1. When that moment has passed and the
engine has not acted yet (a backlog, the broker down, or an attempt that holds the step's
lease while its code runs), it answers about as long as the engine is late, so that calls
thin out instead of coming every second. A run that waits
only for a person (an approval) answers the template's `approvalRetryAfterSeconds`, else its
`retryAfterSeconds`.

Pure functions of the rows the hook path's one query reads (workflows.hookpath.runs); the
answer's message does not depend on them, only its number.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings

from workflows.definitions import typed
from workflows.models import Run, StepRun

#: How long after a step comes due the engine has recorded its outcome and settled the run,
#: when a countdown message polls it (the worker runs it at its ETA).
ENGINE_MARGIN_SECONDS = 0.25


@dataclasses.dataclass(frozen=True)
class StepTimes:
    """What the hook path reads of a run's unfinished step."""

    state: str
    #: Only a person ends its waiting (StepRun.waits_for_person).
    person: bool
    due_at: datetime.datetime | None
    started_at: datetime.datetime | None
    timeout_seconds: int | None


def step_times(rows: Sequence[Sequence[Any]] | None) -> list[StepTimes]:
    """StepTimes from the hook query's array of a run's due steps (engine.sql.STEP_TIMES_COLUMNS:
    state, waits_for_person, due_at and started_at as epoch seconds, timeout_seconds)."""
    return [
        StepTimes(
            state=state,
            person=bool(person),
            due_at=_moment(due_at),
            started_at=_moment(started_at),
            timeout_seconds=timeout,
        )
        for state, person, due_at, started_at, timeout in rows or ()
    ]


def _moment(epoch: float | None) -> datetime.datetime | None:
    return None if epoch is None else datetime.datetime.fromtimestamp(epoch, datetime.UTC)


@dataclasses.dataclass(frozen=True)
class Change:
    """When a run's state can next change, and how long after it the engine has acted."""

    at: datetime.datetime
    margin: float


def next_change(
    *,
    state: str,
    wake_at: datetime.datetime | None,
    deadline_at: datetime.datetime | None,
    deadline_exceeded: bool,
    steps: Iterable[StepTimes],
    now: datetime.datetime,
) -> Change | None:
    """The earliest moment the run's state can change by the engine's hand, or None.

    None when only a person can change it (an approval) or nothing is known (the run has
    no step rows yet).
    """
    changes: list[Change] = []
    if deadline_at is not None and not deadline_exceeded and deadline_at > now:
        # The answer itself turns at the deadline (render reads deadline_at).
        changes.append(Change(deadline_at, 0.0))
    if state == Run.State.PENDING and wake_at is not None:
        changes.append(Change(wake_at, ENGINE_MARGIN_SECONDS))
    if state == Run.State.RUNNING:
        for step in steps:
            changes += _step_changes(step, now)
    return min(changes, key=lambda c: c.at + datetime.timedelta(seconds=c.margin), default=None)


def _step_changes(step: StepTimes, now: datetime.datetime) -> list[Change]:
    out = []
    if step.state in StepRun.DUE and step.due_at is not None:
        if step.state == StepRun.State.WAITING and step.person:
            # Approving wakes the step at once; its slow poll only guards a lost wake-up.
            pass
        else:
            out.append(Change(step.due_at, _margin(step.state, step.due_at, now)))
    if step.timeout_seconds and step.started_at is not None:
        at = step.started_at + datetime.timedelta(seconds=step.timeout_seconds)
        out.append(Change(at, ENGINE_MARGIN_SECONDS))
    return out


def _margin(state: str, due_at: datetime.datetime, now: datetime.datetime) -> float:
    """A waiting step due this far ahead is polled by a batch, up to a beat period late."""
    if (
        state == StepRun.State.WAITING
        and (due_at - now).total_seconds() >= settings.POLL_BATCH_MIN_WAIT_SECONDS
    ):
        return settings.POLL_BATCH_SECONDS + ENGINE_MARGIN_SECONDS
    return ENGINE_MARGIN_SECONDS


def awaiting_person(steps: Iterable[StepTimes]) -> bool:
    """A step that waits for a person (an approval) is waiting: one may end it at any moment."""
    return any(s.state == StepRun.State.WAITING and s.person for s in steps)


def run_seconds(run: Run, steps: Sequence[StepTimes], now: datetime.datetime) -> int:
    """What an unfinished run that holds the hook answers, as HOOKSVC_RETRY_AFTER says."""
    spec = typed.of(run.spec)
    if settings.RETRY_AFTER == "fixed":
        return spec.retry_after_seconds
    change = next_change(
        state=run.state,
        wake_at=run.wake_at,
        deadline_at=run.deadline_at,
        deadline_exceeded=run.deadline_exceeded,
        steps=steps,
        now=now,
    )
    return seconds(change, person=awaiting_person(steps), spec=spec, now=now)


def seconds(
    change: Change | None,
    *,
    person: bool,
    spec: typed.Template,
    now: datetime.datetime,
) -> int:
    """The retryAfterSeconds for one run: the next change plus its margin, in [1, cap].

    The cap is the template's `retryAfterSeconds`. When only a person can change the run
    (`person` and no `change`), it answers `approvalRetryAfterSeconds` if the template sets
    it (shorter: an approval is seen sooner, for more calls), else the cap; when nothing is
    known, the cap.
    """
    cap = spec.retry_after_seconds
    if change is None:
        return spec.person_retry_after_seconds if person else cap
    remaining = (change.at - now).total_seconds()
    if remaining < 0:
        # Overdue: the engine is late (a backlog, the broker down). Come back about as late
        # again, so that calls thin out the longer it lasts instead of coming every second.
        return max(1, min(cap, math.ceil(-remaining)))
    return max(1, min(cap, math.ceil(remaining + change.margin)))
