"""retryAfterSeconds from what the engine knows: the time until a run's state can next change.

Since Cluster API v1.12 the topology controller caches a blocking hook's answer per Cluster and
hook until its `retryAfterSeconds` runs out, and does not call again before then, whatever
else happens (kubernetes-sigs/cluster-api `util/cache/cache.go` HookEntry.ShouldRequeue;
`exp/topology/desiredstate/lifecycle_hooks.go`, `core/reconcilers/topology/cluster/
cluster_controller.go` and `reconcile_state.go` add the entry at `time.Now() +
retryAfterSeconds`). A fixed answer therefore holds the cluster up to that long after the work
is done. This module answers with the time until the run's recorded state can next change,
from the times the engine recorded: a waiting step's next poll (its `due_at`, a timer's end
included), a retry's backoff (a ready step's `due_at`), a step's timeout (its `started_at`
and `timeoutSeconds`), the run's deadline, or a pending run's next start check, or, when
later, the least time its template takes from its start (`least_seconds`: the longest path
through dependsOn of the least time each step's type declares; a run cannot succeed before,
so CAPI's second call comes at its end, not a second after the first to learn it);
plus the margin the engine's rule gives it to act (lifecycle.acts_within), rounded up to whole
seconds, never above the template's `retryAfterSeconds` and never below 1. When that moment
has passed and the engine has not acted yet (the broker down, or an attempt that holds the
step's lease while its code runs), it answers about as long as the engine is late, so that
calls thin out instead of coming every second. A run that waits only for a person (an
approval) answers the template's `approvalRetryAfterSeconds`, else its `retryAfterSeconds`.

Two rules round this out:

- **The engine behind as a whole** (`engine_behind`: its oldest due work, a step no attempt
  holds or a run due to start, is later than a beat period and a margin): a change is then
  expected about that much after its own moment, since the work ahead of it comes first,
  so the answer adds that lateness (a step not reached yet included). A saturated engine
  draws fewer calls, not more.
- **Linger** (`HOOKSVC_HOOK_LINGER_SECONDS`, `linger_until`): retryAfterSeconds is whole
  seconds (CAPI's `RetryAfterSeconds` is an int32: api/runtime/hooks/v1alpha1/
  common_types.go, CommonRetryResponse), so an answer that brings CAPI back just after the
  change holds the cluster up to a second past it. With linger on, the answer is rounded
  down instead, so that CAPI comes back at or just before the engine has acted, and the
  hook view (hooksvc.serving.views) holds that call until the change and answers from
  the state after it. Never while the engine is behind.

Pure functions of the rows the hook path's one query reads (workflows.hookpath.runs); the
answer's message does not depend on them, only its number.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings

from workflows.definitions import typed
from workflows.engine import lifecycle
from workflows.models import Run, StepRun

#: How long after a step comes due the engine has acted, polled by a countdown (the
#: engine's rule: workflows.engine.lifecycle.acts_within).
ENGINE_MARGIN_SECONDS = lifecycle.ENGINE_MARGIN_SECONDS
#: A lingering call first re-reads this long after the change's moment: a countdown's outcome
#: was recorded 10-30 ms after it in the fleet benchmark.
SETTLE_SECONDS = 0.05


#: The engine's oldest due work is later than its normal lag (lifecycle.behind).
engine_behind = lifecycle.behind


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

    None when only a person can change it (an approval) or nothing is known (a pending run
    with no start check due).
    """
    changes: list[Change] = []
    if deadline_at is not None and not deadline_exceeded and deadline_at > now:
        # The answer itself turns at the deadline (render reads deadline_at).
        changes.append(Change(deadline_at, 0.0))
    if state == Run.State.PENDING and wake_at is not None:
        changes.append(Change(wake_at, ENGINE_MARGIN_SECONDS))
    if state == Run.State.RUNNING:
        steps = list(steps)
        for step in steps:
            changes += _step_changes(step, now)
        if not steps:
            # Running with no step due: a step's outcome is recorded and the engine is
            # settling the run (its next steps, or its end) in the next transaction.
            changes.append(Change(now, ENGINE_MARGIN_SECONDS))
    return min(changes, key=lambda c: c.at + datetime.timedelta(seconds=c.margin), default=None)


def _step_changes(step: StepTimes, now: datetime.datetime) -> list[Change]:
    out = []
    if step.state in StepRun.DUE and step.due_at is not None:
        if step.state == StepRun.State.WAITING and step.person:
            # Approving wakes the step at once; its slow poll only guards a lost wake-up.
            pass
        else:
            out.append(Change(step.due_at, _margin(step, step.due_at, now)))
    if step.timeout_seconds and step.started_at is not None:
        at = step.started_at + datetime.timedelta(seconds=step.timeout_seconds)
        out.append(Change(at, ENGINE_MARGIN_SECONDS))
    return out


def _margin(step: StepTimes, due_at: datetime.datetime, now: datetime.datetime) -> float:
    """How long after its recorded due_at the engine has acted on the step, by the engine's
    own rule (lifecycle.acts_within) for a poll set that far ahead.

    How far ahead its poll was set is measured from when it started (its last poll is not
    read), so that a batched step keeps its margin once it is due: a step polled often for
    long is taken for a batched one, which only widens its margin; a call that comes before
    the change lingers through it all the same.
    """
    since = min(step.started_at or now, now)
    return lifecycle.acts_within(step.state, (due_at - since).total_seconds())


def awaiting_person(steps: Iterable[StepTimes]) -> bool:
    """A step that waits for a person (an approval) is waiting: one may end it at any moment."""
    return any(s.state == StepRun.State.WAITING and s.person for s in steps)


@dataclasses.dataclass(frozen=True)
class Wait:
    """What an unfinished run answers: its retryAfterSeconds, and when a call that finds
    it so should re-read instead of answering (None: answer at once)."""

    seconds: int
    linger_until: datetime.datetime | None = None


def run_wait(
    run: Run, steps: Sequence[StepTimes], now: datetime.datetime, *, late: float = 0.0
) -> Wait:
    """What an unfinished run that holds the hook answers, as HOOKSVC_RETRY_AFTER says;
    `late` is how late the engine's oldest due work is (runs.Found.late)."""
    spec = typed.of(run.spec)
    if settings.RETRY_AFTER == "fixed":
        return Wait(spec.retry_after_seconds)
    change = next_change(
        state=run.state,
        wake_at=run.wake_at,
        deadline_at=run.deadline_at,
        deadline_exceeded=run.deadline_exceeded,
        steps=steps,
        now=now,
    )
    window = settings.HOOK_LINGER_SECONDS
    number = seconds(
        change, person=awaiting_person(steps), spec=spec, now=now, late=late, linger=window
    )
    least = least_seconds(spec) if run.state == Run.State.PENDING and change is not None else 0
    if least > 0:
        # It cannot succeed before it has started (not before now) and waited out its
        # template's waits: no call is worth making before then. Its deadline still
        # comes first (next_change takes the earlier), and a later start check wins.
        end = next_change(
            state=run.state,
            wake_at=now + datetime.timedelta(seconds=least),
            deadline_at=run.deadline_at,
            deadline_exceeded=run.deadline_exceeded,
            steps=(),
            now=now,
        )
        number = max(
            number, seconds(end, person=False, spec=spec, now=now, late=late, linger=window)
        )
    return Wait(
        number,
        # A run not started yet answers at once (1 s, or its least time): CAPI sees at
        # once that the hook holds, and a call never waits for a worker to pick a run up.
        linger_until(change, now=now, late=late, window=window)
        if run.state == Run.State.RUNNING
        else None,
    )


def least_seconds(spec: typed.Template) -> float:
    """The least time a run of `spec` takes from its start to succeed: the longest path
    through its steps' dependsOn DAG, each step weighing the least time its type declares
    (StepType.least_seconds: a `wait`'s `seconds`, workflows.steps.wait; at most its
    `timeoutSeconds`, when it fails), so no step type is known here by name.

    A run succeeds only once every step is done (engine.scheduling._settle: StepRun.DONE,
    succeeded or skipped), and a step runs only once its dependencies are done
    (_promotable). A step is skipped only by an operator (operators.actions.step_skip), who
    acts on a started run's steps, as a person may approve or release at any time: not a
    change the engine can foresee. A template has no conditional steps, and no onFailure
    mode lets a run succeed with a step not done. A failure may come sooner (a parallel
    step, e.g. an `http`, can fail at once): it holds the cluster either way, and is seen at
    the next call, never later than the template's `retryAfterSeconds`, the cap.

    Cached per Template object (typed.of gives the same one for each distinct stored spec).
    """
    cached = _least.get(id(spec))
    if cached is not None and cached[0] is spec:
        return cached[1]
    least = _longest_path(spec.steps)
    with _least_lock:
        if len(_least) >= typed.CACHE_SIZE:
            _least.clear()  # templates rebuilt outside typed's cache (tests, operator paths)
        _least[id(spec)] = (spec, least)
    return least


#: least_seconds by the Template's id; the entry holds the Template, so its id is not reused.
_least: dict[int, tuple[typed.Template, float]] = {}
_least_lock = threading.Lock()


def _duration(step: typed.Step) -> float:
    least = lifecycle.least_seconds(step.type, step.params)
    return min(least, float(step.timeout_seconds)) if step.timeout_seconds else least


def _longest_path(steps: Sequence[typed.Step]) -> float:
    """The longest path's weight; an unknown dependency counts as done and a cycle (both
    refused on apply, possible in a row edited by hand) ends the path: only ever less."""
    by_name = {s.name: s for s in steps}
    ends: dict[str, float] = {}

    def end(step: typed.Step, seen: frozenset[str]) -> float:
        if step.name in ends:
            return ends[step.name]
        seen = seen | {step.name}
        start = max(
            (end(by_name[d], seen) for d in step.depends_on if d in by_name and d not in seen),
            default=0.0,
        )
        ends[step.name] = start + _duration(step)
        return ends[step.name]

    return max((end(s, frozenset()) for s in steps), default=0.0)


def seconds(
    change: Change | None,
    *,
    person: bool,
    spec: typed.Template,
    now: datetime.datetime,
    late: float = 0.0,
    linger: float = 0.0,
) -> int:
    """The retryAfterSeconds for one run: the next change plus its margin, in [1, cap].

    The cap is the template's `retryAfterSeconds`, or while a person may act
    (`person`) its `approvalRetryAfterSeconds` if that is shorter (an approval is seen
    sooner, for more calls); when nothing is known, the cap. While the engine is behind
    (`late`, see engine_behind) the change is expected that much later. With a `linger`
    window (seconds), the answer is rounded down from the change plus its margin, or plus
    half the window if that is less (a batch poll's margin is a beat period): CAPI comes back
    before the engine has acted, or just after, and a call that comes before lingers
    (linger_until) through the rest.
    """
    cap = spec.retry_after_seconds
    if person:
        # A person may approve at any moment: never later than approvalRetryAfterSeconds
        # (its step's own timeout, days ahead, is a change too).
        cap = min(cap, spec.person_retry_after_seconds)
    if change is None:
        return cap
    remaining = (change.at - now).total_seconds()
    if engine_behind(late):
        # The due work ahead of this change comes first: come back about when the engine,
        # as late as it is now, reaches it; a step not reached yet is no exception.
        return max(1, min(cap, math.ceil(max(remaining, 0.0) + late)))
    if remaining < 0:
        # Overdue while the engine keeps up (an attempt holding the step, the broker down):
        # come back about as late again, so that calls thin out the longer it lasts.
        return max(1, min(cap, math.ceil(-remaining)))
    if linger > 0:
        return max(1, min(cap, math.floor(remaining + min(change.margin, linger / 2))))
    return max(1, min(cap, math.ceil(remaining + change.margin)))


def linger_until(
    change: Change | None, *, now: datetime.datetime, late: float, window: float
) -> datetime.datetime | None:
    """When a call that finds the run before `change` should re-read it, or None to answer
    at once: only if the engine is expected to act within `window` seconds and is not
    behind. A change overdue past its margin means the engine is late for it: no linger."""
    if change is None or window <= 0 or engine_behind(late):
        return None
    if change.at + datetime.timedelta(seconds=change.margin) < now:
        return None
    if (change.at - now).total_seconds() > window:
        return None
    return max(now, change.at + datetime.timedelta(seconds=SETTLE_SECONDS))
