"""Which runs hold their cluster's lifecycle right now, as one SQL filter over the fleet.

A run holds CAPI when the hook answers from it with a Failure or `retryAfterSeconds > 0`:
the rules of `workflows.hookpath.answers.render`, written here as a `Q` so that the
metrics (hooksvc/serving/scrape.py) count the whole fleet in one query. The two are kept
equal by tests/workflows/test_fleet_metrics.py, which renders each case both ways.
`waiting_since` says since when a run awaiting approval has waited for its person.
"""

from __future__ import annotations

import datetime

from django.db.models import OuterRef, Q, Subquery

from hooksvc.contract import catalog
from workflows.models import Run, StepRun


def blocking_hooks() -> tuple[str, ...]:
    """Hooks whose answer can hold the lifecycle (AfterControlPlaneInitialized and hooksvc's
    ClusterDeleted cannot: their answers carry no retryAfterSeconds)."""
    return tuple(name for name, hook in catalog.MOMENTS.items() if hook.blocking)


def holds(now: datetime.datetime) -> Q:
    """Runs whose answer, at `now`, holds their cluster's lifecycle."""
    past_deadline = Q(deadline_exceeded=True) | Q(deadline_at__lte=now)
    return (
        Q(hook__in=blocking_hooks(), released=False)
        & ~Q(state=Run.State.SUCCEEDED)
        # Containment (jsonb @>) is true or false, never NULL, where a key is absent
        # (older snapshots): a NULL under NOT would drop the run.
        & ~Q(spec__contains={"holdsLifecycle": False})
        & ~(past_deadline & Q(spec__contains={"onDeadline": "Proceed"}))
    )


def waiting_since() -> Subquery:
    """For a run (as `OuterRef`), when its earliest step now waiting for a person started."""
    steps = StepRun.objects.filter(
        run=OuterRef("pk"), waits_for_person=True, state=StepRun.State.WAITING
    ).order_by("started_at")
    return Subquery(steps.values("started_at")[:1])
