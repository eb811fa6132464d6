"""The fleet as the admin's landing page reads it: the clusters held, and the runs apart.

A cluster is held while at least one of its runs holds its lifecycle (the hook's answer
holds CAPI: workflows.operators.holding). The fleet counts clusters, not runs: how many are
held, and by what (a run waiting for approval, running, failed, ...; which hook), and lists
them held longest first, each with EVERY run that holds it. Runs that hold nothing (a hook
CAPI does not wait for, such as AfterControlPlaneInitialized; `holdsLifecycle: false`;
released; past a `Proceed` deadline) are apart: counted by state, and listed on their own
view while active or for FLEET_RECENT after they ended. `still_holding` says, for a bulk
action's confirmation, which runs will still hold the clusters it acts on. Each read is one
query, or two for a page of clusters (the clusters, then their runs), whatever the fleet's
size, and each takes the `actor` who asks: they find only the runs of the namespaces the
actor may view (workflows.operators.access), counts included.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from django.db.models import Count, Min, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform, KeyTransform

from workflows.engine import stalls
from workflows.hookpath import labelselector
from workflows.models import Run
from workflows.operators import access, holding, selectors, states

#: Runs that hold nothing stay on the fleet's background view this long after they ended.
FLEET_RECENT = datetime.timedelta(hours=24)
#: The fleet's two views: the clusters held (the landing page), and the runs apart.
HELD, BACKGROUND = "", "background"
#: Display states a run that holds its cluster can be in (released ones hold nothing).
HOLDING_STATES = tuple(s for s in states.HOLDING)
#: Display states of runs that hold nothing, as the background view counts them.
BACKGROUND_STATES = tuple(s for s in states.State if s != states.State.SUCCEEDED)


class FilterError(ValueError):
    """A fleet filter that cannot be applied; the message says what is accepted."""


@dataclasses.dataclass(frozen=True)
class FleetFilter:
    """What the fleet view narrows to; empty fields do not filter."""

    namespace: str = ""
    hook: str = ""
    template: str = ""
    #: `key=value`: the cluster's label, as the hook call carried it (the run's context).
    label: str = ""
    #: A display state (workflows/operators/states.py).
    state: str = ""
    #: HELD (clusters held) or BACKGROUND (runs that hold nothing).
    view: str = HELD

    def apply(self, runs: QuerySet[Run]) -> QuerySet[Run]:
        """`runs` narrowed by every field but the state; FilterError for a malformed one."""
        if self.view not in (HELD, BACKGROUND):
            raise FilterError(
                f"view {self.view!r}: the fleet shows the clusters held or 'background'"
            )
        if self.namespace:
            runs = runs.filter(cluster_namespace=self.namespace)
        if self.hook:
            runs = runs.filter(hook=self.hook)
        if self.template:
            runs = runs.filter(template_name=self.template)
        if self.label:
            key, equals, value = self.label.partition("=")
            key = key.strip()
            if not equals or not labelselector.is_key(key):
                raise FilterError(f"label filter {self.label!r}: write it as key=value")
            labels = KeyTransform("labels", KeyTransform("cluster", "context"))
            runs = runs.alias(fleet_label=KeyTextTransform(key, labels)).filter(
                fleet_label=value.strip()
            )
        return runs

    def state_q(self) -> Q:
        if not self.state:
            return Q()
        try:
            return states.where(self.state)
        except ValueError as exc:
            raise FilterError(str(exc)) from None


def _recent(now: datetime.datetime) -> Q:
    """Active, or ended (without success) in the last FLEET_RECENT."""
    return Q(state__in=Run.ACTIVE) | (
        ~Q(state=Run.State.SUCCEEDED) & Q(finished_at__gte=now - FLEET_RECENT)
    )


def _visible(actor: access.Actor) -> QuerySet[Run]:
    return Run.objects.filter(actor.where())


def fleet_runs(now: datetime.datetime, *, actor: access.Actor) -> QuerySet[Run]:
    """Every run the fleet is about: those that hold their cluster, and those apart."""
    return _visible(actor).filter(holding.holds(now) | _recent(now))


def held_runs(now: datetime.datetime, *, actor: access.Actor) -> QuerySet[Run]:
    """Runs that hold their cluster's lifecycle at `now`, however old."""
    return _visible(actor).filter(holding.holds(now))


def background_runs(now: datetime.datetime, *, actor: access.Actor) -> QuerySet[Run]:
    """Runs that hold nothing, active or recently ended without success."""
    return _visible(actor).filter(_recent(now)).exclude(holding.holds(now))


@dataclasses.dataclass(frozen=True)
class HeldCluster:
    """A cluster held, and every run that holds it (display state and current step each)."""

    key: str
    namespace: str
    name: str
    #: When its longest hold began (holding.held: the run's creation).
    since: datetime.datetime
    runs: list[Run]


def held_clusters(
    filters: FleetFilter,
    *,
    actor: access.Actor,
    now: datetime.datetime,
    offset: int,
    limit: int,
) -> list[HeldCluster]:
    """A page of the clusters held that the filters find (a cluster is found when one of the
    runs that hold it matches them all), held longest first, each with every run that holds
    it, oldest first: two queries."""
    held = held_runs(now, actor=actor)
    matching = filters.apply(held).filter(filters.state_q()).values("cluster_key")
    page = list(
        held.filter(cluster_key__in=matching)
        .values("cluster_key")
        .annotate(since=Min("created_at"))
        .order_by("since", "cluster_key")[offset : offset + limit]
    )
    keys = [row["cluster_key"] for row in page]
    runs: dict[str, list[Run]] = {key: [] for key in keys}
    found = stalls.annotate(
        selectors.with_current_step(states.annotate(held.filter(cluster_key__in=keys))), now
    )
    for run in found.order_by("created_at", "pk"):
        runs[run.cluster_key].append(run)
    return [
        HeldCluster(
            key=row["cluster_key"],
            namespace=runs[row["cluster_key"]][0].cluster_namespace,
            name=runs[row["cluster_key"]][0].cluster_name,
            since=row["since"],
            runs=runs[row["cluster_key"]],
        )
        for row in page
    ]


def background_page(
    filters: FleetFilter,
    *,
    actor: access.Actor,
    now: datetime.datetime,
    offset: int,
    limit: int,
) -> list[Run]:
    """A page of the runs that hold nothing that the filters find, newest first: one query."""
    runs = filters.apply(background_runs(now, actor=actor)).filter(filters.state_q())
    found = stalls.annotate(selectors.with_current_step(states.annotate(runs)), now).order_by(
        "-created_at", "-pk"
    )
    return list(found[offset : offset + limit])


def shown_runs(
    filters: FleetFilter, *, actor: access.Actor, now: datetime.datetime
) -> QuerySet[Run]:
    """Every run the filters' view shows, on all its pages: each run that holds a cluster the
    filters find, or each background run they find (a bulk action's "all pages")."""
    if filters.view == BACKGROUND:
        return filters.apply(background_runs(now, actor=actor)).filter(filters.state_q())
    held = held_runs(now, actor=actor)
    matching = filters.apply(held).filter(filters.state_q()).values("cluster_key")
    return held.filter(cluster_key__in=matching)


def counts(filters: FleetFilter, *, actor: access.Actor, now: datetime.datetime) -> dict[str, int]:
    """The fleet's figures in one query, every filter but the state applied (so that each
    figure can be clicked), and the rows of each view with every filter:

    `held`: clusters held; `stalled`: clusters held by a run with a stalled step
    (workflows.engine.stalls); `held_<state>`: clusters held by a run in that display state;
    `hook_<hook>`: clusters held by a run of that hook; `background_<state>`: runs that hold
    nothing, by display state; `rows_held` (clusters) and `rows_background` (runs): what
    each view lists.
    """
    runs = filters.apply(fleet_runs(now, actor=actor))
    holds = holding.holds(now)
    apart = ~holds & _recent(now)
    wanted = filters.state_q()

    def clusters(where: Q) -> Count:
        return Count("cluster_key", distinct=True, filter=where)

    figures: dict[str, Any] = {
        "held": clusters(holds),
        "stalled": clusters(holds & Q(stalls.of_runs(now))),
        "rows_held": clusters(holds & wanted),
        "rows_background": Count("pk", filter=apart & wanted),
        # Aliases of their own: "released" is also a field of Run.
        **{f"held_{s}": clusters(holds & states.where(s)) for s in HOLDING_STATES},
        **{f"hook_{h}": clusters(holds & Q(hook=h)) for h in holding.blocking_hooks()},
        **{
            f"background_{s}": Count("pk", filter=apart & states.where(s))
            for s in BACKGROUND_STATES
        },
    }
    return {key: int(value) for key, value in runs.aggregate(**figures).items()}


def choices(*, actor: access.Actor, now: datetime.datetime) -> dict[str, list[str]]:
    """The namespaces and templates on the fleet, for its filter menus (one query)."""
    pairs = (
        fleet_runs(now, actor=actor)
        .order_by()
        .values_list("cluster_namespace", "template_name")
        .distinct()
    )
    namespaces, templates = set(), set()
    for namespace, template in pairs:
        namespaces.add(namespace)
        templates.add(template)
    return {"namespaces": sorted(namespaces), "templates": sorted(templates)}


def still_holding(
    chosen: list[Run], *, actor: access.Actor, now: datetime.datetime
) -> dict[str, list[Run]]:
    """For each cluster of `chosen` (by key), the runs not among them that hold it now: an
    action on `chosen` alone does not release it (one query)."""
    others = held_runs(now, actor=actor).filter(cluster_key__in={r.cluster_key for r in chosen})
    found: dict[str, list[Run]] = {}
    ids = [r.pk for r in chosen]
    for run in states.annotate(others.exclude(pk__in=ids)).order_by("created_at", "pk"):
        found.setdefault(run.cluster_key, []).append(run)
    return found
