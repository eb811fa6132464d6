"""The honest state of a run, as operators see it: one definition for the admin, CLI and metrics.

`Run.state` is the engine's state; what an operator needs is finer and truer: a running
run whose step waits for a person is `awaiting_approval`, and a run an operator released
is `released` (the lifecycle went on) rather than failed, cancelled or running. The state
is computed in SQL (`annotate`, `where`, `counts`: a filter or a count stays one query
over the whole fleet) and in Python for one run (`of`); both follow the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import models
from django.db.models import Case, Exists, F, OuterRef, Q, QuerySet, Value, When

from workflows.models import Run, StepRun

#: The annotation `annotate` adds to a queryset of runs.
FIELD = "display_state"


class State(models.TextChoices):
    """A run's display state, in the order a fleet view counts them."""

    AWAITING_APPROVAL = "awaiting_approval", "waiting for approval"
    RUNNING = "running", "running"
    PENDING = "pending", "pending"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"
    RELEASED = "released", "released"
    SUCCEEDED = "succeeded", "succeeded"


#: States in which the run still holds its cluster's lifecycle.
HOLDING = (State.AWAITING_APPROVAL, State.RUNNING, State.PENDING, State.FAILED, State.CANCELLED)


def step_waits_for_person(step: StepRun) -> bool:
    """Whether this step is waiting for a person right now (its type says so:
    StepType.waits_for_person, recorded on the row as the run started)."""
    return step.state == StepRun.State.WAITING and step.waits_for_person


def _waiting_for_person() -> Exists:
    return Exists(
        StepRun.objects.filter(
            run=OuterRef("pk"), waits_for_person=True, state=StepRun.State.WAITING
        )
    )


# The rules, in order: a release wins over every state but success (a released run may
# still finish); a running run with a step waiting for a person awaits approval.
_RELEASED = Q(released=True) & ~Q(state=Run.State.SUCCEEDED)


def _awaiting() -> Q:
    return Q(released=False, state=Run.State.RUNNING) & Q(_waiting_for_person())


def annotate(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`runs` with the display state as the `display_state` annotation (no extra query)."""
    expression = Case(
        When(_RELEASED, then=Value(State.RELEASED.value)),
        When(_awaiting(), then=Value(State.AWAITING_APPROVAL.value)),
        default=F("state"),
        output_field=models.CharField(),
    )
    return runs.annotate(**{FIELD: expression})


def where(state: str | State) -> Q:
    """A filter for runs in display state `state`; ValueError names the states if unknown."""
    if state not in State.values:
        raise ValueError(f"unknown state {state!r}; one of: {', '.join(State.values)}")
    if state == State.RELEASED:
        return _RELEASED
    if state == State.AWAITING_APPROVAL:
        return _awaiting()
    if state == State.RUNNING:
        return Q(state=state, released=False) & ~Q(_waiting_for_person())
    if state == State.SUCCEEDED:
        return Q(state=state)
    return Q(state=state, released=False)


def where_any(states: Iterable[str | State]) -> Q:
    """Runs in any of `states`."""
    combined = Q(pk__in=[])
    for state in states:
        combined |= where(state)
    return combined


def counts(runs: QuerySet[Run]) -> dict[str, int]:
    """How many of `runs` are in each display state (every state present, 0 when none)."""
    rows = annotate(runs.order_by()).values(FIELD).annotate(n=models.Count("pk"))
    found = {row[FIELD]: row["n"] for row in rows}
    return {state: found.get(state, 0) for state in State.values}


def of(run: Run) -> State:
    """The display state of one run; reads its steps (one query) only when it is running.

    A run from `annotate(...)` answers from its annotation.
    """
    annotated = getattr(run, FIELD, None)
    if annotated is not None:
        return State(annotated)
    if run.released and run.state != Run.State.SUCCEEDED:
        return State.RELEASED
    if run.state == Run.State.RUNNING and (
        run.steps.filter(waits_for_person=True, state=StepRun.State.WAITING).exists()
    ):
        return State.AWAITING_APPROVAL
    return State(run.state)


def label(state: str) -> str:
    """The words the admin and the CLI show for `state` ("waiting for approval")."""
    return str(State(state).label)
