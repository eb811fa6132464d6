"""Which runs hold their cluster's lifecycle, and for how long: one definition for every page.

A run holds CAPI when the hook answers from it with a Failure or `retryAfterSeconds > 0`:
the rules of `workflows.hookpath.answers.render`, written here as a `Q` (`holds`) so that
the fleet and the metrics (hooksvc/serving/scrape.py) count the whole fleet in one query,
and for one run in Python (`held`). tests/workflows/test_fleet_metrics.py keeps both equal
to the answer itself, case by case.

"Held for" is the same span everywhere (run page, cluster page, fleet, `workflows why`):
from the run's creation, which is the hook call that first answered "hold" for its moment
(the call creates the run and answers from it), until now while it holds, else until it
let go: its success, its release by an operator, or its deadline under `onDeadline:
Proceed`. A failed or cancelled run holds on (under `onFailure: Block` the hook keeps
answering retryAfterSeconds; under `Fail` it answers Failure, which CAPI also waits on).
A run of a hook CAPI does not wait for, or under `holdsLifecycle: false`, never holds.
`waiting_since` says since when a run awaiting approval has waited for its person.
"""

from __future__ import annotations

import dataclasses
import datetime

from django.db.models import OuterRef, Q, Subquery

from hooksvc.contract import catalog
from workflows import durations
from workflows.definitions import typed
from workflows.models import EventKind, Run, RunEvent, StepRun


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
        & ~(past_deadline & Q(spec__contains={"onDeadline": typed.PROCEED}))
    )


def waiting_since() -> Subquery:
    """For a run (as `OuterRef`), when its earliest step now waiting for a person started."""
    steps = StepRun.objects.filter(
        run=OuterRef("pk"), waits_for_person=True, state=StepRun.State.WAITING
    ).order_by("started_at")
    return Subquery(steps.values("started_at")[:1])


def never_holds(run: Run) -> str:
    """Why `run` can never hold its cluster ("" if it can): its hook or its template."""
    if run.hook not in blocking_hooks():
        return f"CAPI does not wait for {run.hook}"
    if run.spec.get("holdsLifecycle", True) is False:
        return "holdsLifecycle: false (it runs in the background)"
    return ""


@dataclasses.dataclass(frozen=True)
class Held:
    """The span a run held (or holds) its cluster's lifecycle."""

    since: datetime.datetime
    #: When it let go; None while it holds.
    until: datetime.datetime | None
    #: What ended the hold: "succeeded", "released", "proceeded past its deadline"; "".
    ended_by: str = ""

    @property
    def holding(self) -> bool:
        return self.until is None

    def seconds(self, now: datetime.datetime) -> float:
        return max(0.0, ((self.until or now) - self.since).total_seconds())

    def span(self, now: datetime.datetime) -> str:
        """How long, at a glance: "12 min"."""
        return durations.span(self.seconds(now))

    def times(self) -> str:
        """The absolute times: "since 2025-06-01 12:03:04 UTC" while it holds; once it let
        go, "from 2025-06-01 12:03:04 UTC until released at 2025-06-01 12:07:11 UTC"."""
        if self.until is None:
            return f"since {at(self.since)}"
        return f"from {at(self.since)} until {self.ended_by} at {at(self.until)}"

    def describe(self, now: datetime.datetime) -> str:
        """The span as every page shows it, relative then absolute: "12 min, since ..."."""
        return f"{self.span(now)}, {self.times()}"


#: An absolute time to the second, with its zone: 2025-06-01 12:03:04 UTC.
at = durations.at


def held(
    run: Run, now: datetime.datetime, *, released_at: datetime.datetime | None = None
) -> Held | None:
    """How long `run` has held (or held) its cluster's lifecycle at `now`; None if it never
    held it. `released_at`: when an operator released it (`released_at_of`); a released run
    without one let go at its end, or is taken to let go now."""
    if never_holds(run):
        return None
    ends: list[tuple[datetime.datetime, str]] = []
    if run.released:
        ends.append((released_at or run.finished_at or now, "released"))
    if run.state == Run.State.SUCCEEDED:
        ends.append((run.finished_at or now, "succeeded"))
    deadline = run.deadline_at if run.deadline_at is not None and run.deadline_at <= now else None
    if run.spec.get("onDeadline") == typed.PROCEED and (deadline or run.deadline_exceeded):
        ends.append((deadline or run.finished_at or now, "proceeded past its deadline"))
    if not ends:
        return Held(run.created_at, None)
    until, why = min(ends, key=lambda end: end[0])
    return Held(run.created_at, max(until, run.created_at), why)


def released_at_of(run_ids: list[int]) -> dict[int, datetime.datetime]:
    """When each of these runs was released by an operator (its first release; one query)."""
    found: dict[int, datetime.datetime] = {}
    events = RunEvent.objects.filter(
        run_id__in=run_ids, kind=EventKind.ACTION, name="release"
    ).order_by("at", "id")
    for run_id, moment in events.values_list("run_id", "at"):
        found.setdefault(run_id, moment)
    return found
