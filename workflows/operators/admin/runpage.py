"""A run's page, leading with its steps: a timeline with start, duration, attempts, last error,
next retry and the approval's text; then the hook calls (repeats collapsed), the history,
and the spec and context collapsed below. While the run is active the live part of the page
asks for itself again every few seconds (htmx swaps it in place: no full-page reload).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from django.urls import reverse
from django.utils import timezone

from workflows.engine import lifecycle, stalls
from workflows.models import HookCall, Run, StepRun
from workflows.operators import holding, selectors, states
from workflows.operators.admin import common
from workflows.steps import registry

#: The newest hook calls read for a run's page; repeats collapse into one line each.
HOOK_CALLS_READ = 500
#: How often the live part of an active run's page refreshes itself.
REFRESH_SECONDS = 3
STEP_ACTIONS = {"approve": "Approve", "skip": "Skip", "retry": "Retry"}


@dataclasses.dataclass(frozen=True)
class StepLine:
    step: StepRun
    state: str
    label: str
    started: str
    duration: str
    attempts: str
    #: The text of the last failure, when the step failed or waits to retry.
    error: str
    #: Progress text otherwise ("waiting for approval", "3 of 5 pods ready").
    progress: str
    next_at: str
    #: What the step asks a person (an approval's `with.message`).
    asks: str
    files: list[tuple[str, int, str]]
    actions: list[tuple[str, str]]
    left: float
    width: float
    #: That it made no progress for longer than is normal (as the fleet and `why` say it).
    stalled: str = ""


@dataclasses.dataclass(frozen=True)
class CallGroup:
    """Consecutive hook calls that got the same answer: one line, "x 50 over 4 min"."""

    newest: HookCall
    oldest: HookCall
    count: int

    @property
    def repeats(self) -> str:
        if self.count == 1:
            return ""
        seconds = (self.newest.at - self.oldest.at).total_seconds()
        return f"\N{MULTIPLICATION SIGN} {self.count} over {common.span(seconds)}"


def step_action_applies(step: StepRun, action: str) -> bool:
    if action == "approve":
        return step.waits_for_person and step.state not in StepRun.FINISHED
    if action == "skip":
        return step.state not in StepRun.DONE
    return step.state in (StepRun.State.FAILED, StepRun.State.CANCELLED)


def _attempts(step: StepRun) -> str:
    """Attempts made of those allowed: a running or finished attempt counts, a failed one too.

    A step a person ends (an approval) or that does no I/O (a wait, a noop) makes no
    attempts worth counting: "-" until one of its attempts fails."""
    if not step.failures and (step.waits_for_person or lifecycle.inline(step.type)):
        return "-"
    running = step.state in (StepRun.State.WAITING, StepRun.State.SUCCEEDED) or (
        step.state == StepRun.State.CANCELLED and step.started_at is not None
    )
    made = step.failures + (1 if running else 0)
    return f"{made} of {max(made, step.retries + 1)}"


def _next(step: StepRun, now: datetime.datetime) -> str:
    if step.due_at is None or step.state in StepRun.FINISHED:
        return "-"
    if states.step_waits_for_person(step):
        return "when approved"
    left = (step.due_at - now).total_seconds()
    verb = "next check"
    if step.state == StepRun.State.READY:
        verb = "retry" if step.failures else "starts"
    due = f"in {common.span(left)}" if left > 0 else "due now"
    return f"{verb} at {common.when(step.due_at)[11:]} ({due})"


def step_line(
    step: StepRun,
    run: Run,
    start: datetime.datetime,
    total: float,
    now: datetime.datetime,
    *,
    actions: bool = True,
) -> StepLine:
    """A step's line; `actions` False leaves its actions out (the person may not operate)."""
    person = states.step_waits_for_person(step)
    end = step.finished_at or (now if step.started_at else None)
    failing = step.state == StepRun.State.FAILED or (
        step.state == StepRun.State.READY and step.failures > 0
    )
    asks = registry.asks(step.params, waits_for_person=step.waits_for_person)
    left = width = 0.0
    if step.started_at is not None and end is not None:
        left = 100 * (step.started_at - start).total_seconds() / total
        width = max(0.5, 100 * (end - step.started_at).total_seconds() / total)
    return StepLine(
        step=step,
        state=states.State.AWAITING_APPROVAL.value if person else step.state,
        label=str(states.State.AWAITING_APPROVAL.label) if person else step.state,
        started=common.when(step.started_at),
        duration=common.between(step.started_at, end),
        attempts=_attempts(step),
        error=step.message if failing else "",
        progress="" if failing else step.message,
        next_at=_next(step, now),
        asks=asks,
        files=[
            (
                artifact.name,
                artifact.size,
                reverse("admin:workflows_run_artifact", args=[run.pk, step.name, artifact.name]),
            )
            for artifact in step.artifacts.all()
        ],
        actions=[
            (label, reverse("admin:workflows_run_step_action", args=[run.pk, step.name, action]))
            for action, label in STEP_ACTIONS.items()
            if actions and step_action_applies(step, action)
        ],
        left=round(left, 2),
        width=round(width, 2),
        stalled=_stalled(step, run, now),
    )


def _stalled(step: StepRun, run: Run, now: datetime.datetime) -> str:
    found = stalls.describe(step, now) if run.state == Run.State.RUNNING else None
    return "" if found is None else stalls.wording(step.name, found["for"], found["normal"])


def call_groups(calls: list[HookCall]) -> list[CallGroup]:
    """Runs of consecutive calls (newest first) with the same answer, as one group each."""
    groups: list[CallGroup] = []
    for call in calls:
        key = (call.handler, call.status, call.retry_after, call.message)
        last = groups[-1] if groups else None
        if last is not None and key == (
            last.newest.handler,
            last.newest.status,
            last.newest.retry_after,
            last.newest.message,
        ):
            groups[-1] = CallGroup(last.newest, call, last.count + 1)
        else:
            groups.append(CallGroup(call, call, 1))
    return groups


def _held(run: Run, now: datetime.datetime) -> tuple[str, str]:
    """How long the run held its cluster, and from when until when (operators/holding.py)."""
    held = holding.held(run, now, released_at=holding.released_at_of([run.pk]).get(run.pk))
    if held is None:
        return "holds nothing", holding.never_holds(run)
    return held.span(now), held.times()


def live_context(
    run: Run, run_actions: list[tuple[str, str]], *, step_actions: bool = True
) -> dict[str, Any]:
    """What the live part of the page shows: the summary, the steps, the calls, the history.

    `run_actions` are those the person may take; `step_actions` whether they may operate
    its steps (approve, skip, retry)."""
    now = timezone.now()
    state = states.of(run)
    end = run.finished_at or now
    start = run.created_at
    total = max((end - start).total_seconds(), 1.0)
    steps = run.steps.order_by("position").prefetch_related("artifacts")
    deadline = "-"
    if run.deadline_at is not None:
        left = (run.deadline_at - now).total_seconds()
        deadline = f"{common.when(run.deadline_at)} (" + (
            f"in {common.span(left)})" if left >= 0 else f"passed {common.span(-left)} ago)"
        )
    calls = selectors.hook_calls_of(run, HOOK_CALLS_READ)
    lines = [step_line(step, run, start, total, now, actions=step_actions) for step in steps]
    return {
        "run": run,
        "state": state,
        "live": run.state in Run.ACTIVE,
        "refresh_seconds": REFRESH_SECONDS,
        "now": common.when(now),
        "created": common.when(run.created_at),
        "started": common.when(run.started_at),
        "finished": common.when(run.finished_at),
        "moment": common.moment(run),
        # How long the lifecycle waited on it: the one definition (operators/holding.py).
        "held": _held(run, now),
        "ran_for": common.between(run.started_at, end),
        "deadline": deadline,
        "steps": lines,
        "stalled": [line.stalled for line in lines if line.stalled],
        "call_groups": call_groups(calls),
        "calls_read": len(calls),
        "calls_cap": HOOK_CALLS_READ,
        "events": list(run.events.order_by("-at", "-id")),
        "run_actions": run_actions,
    }
