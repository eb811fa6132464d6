"""The fleet view, the admin's landing page: the clusters held, held longest first.

On top, how many clusters are held and by what (a run waiting for approval, running,
pending, failed or cancelled; which hook), each a filter, and how many of them by a run
whose step is stalled (workflows.engine.stalls: it is marked on its line), and beside them
the runs that hold nothing (a hook CAPI does not wait for, released, ...), counted by state
and listed on a view of their own. A cluster's row names every run that holds it, each with
its state, step, why, how long it has held and since when (workflows.operators.holding), and
a box to tick for a bulk action (`bulk`), on the runs ticked or on everything the filter
finds. The rows of a page are two queries whatever the fleet's size
(workflows.operators.fleet.held_clusters); the counts and the filter menus are one query
each. Rows, counts, menus and the bypass banner cover only the namespaces the person may
view, and the bulk actions offered are those their roles allow somewhere
(workflows.operators.access).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, QueryDict
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from hooksvc.contract import catalog
from workflows.engine import messages, stalls
from workflows.models import Run, StepRun
from workflows.operators import access, bypasses, fleet, holding, rollouts, selectors, states
from workflows.operators import bulk as bulk_actions
from workflows.operators.admin import common

PER_PAGE = 50
FILTER_FIELDS = ("namespace", "hook", "template", "label", "state", "view")


@dataclasses.dataclass(frozen=True)
class RunLine:
    """A run's line on the fleet (under its cluster) and on a bulk action's confirmation."""

    run: Run
    state: states.State
    moment: str
    step: str
    #: The approval's own text when a person is asked, else what the run is doing or why it
    #: stopped, without the suggested commands (the line offers the actions).
    why: str
    asks_a_person: bool
    #: The current step's last error, when it failed (what a retry would start over).
    error: str
    #: How long it has held its cluster, and since when ("" when it holds nothing).
    held_for: str
    held_since: str
    #: Why it holds nothing ("" when it holds its cluster).
    holds_nothing: str
    deadline: str
    deadline_passed: bool
    #: Its step that made no progress for longer than is normal, and for how long
    #: (workflows.engine.stalls); "" when none is stalled.
    stalled: str = ""


@dataclasses.dataclass(frozen=True)
class ClusterRow:
    """A cluster held: how long (its longest hold) and every run that holds it."""

    cluster: fleet.HeldCluster
    held_for: str
    held_since: str
    lines: list[RunLine]


def filters_of(query: QueryDict) -> fleet.FleetFilter:
    return fleet.FleetFilter(**{name: query.get(name, "").strip() for name in FILTER_FIELDS})


def _deadline(run: Run, now: datetime.datetime) -> tuple[str, bool]:
    if run.deadline_at is None:
        return "-", False
    left = (run.deadline_at - now).total_seconds()
    if left >= 0:
        return f"in {common.span(left)}", False
    return f"passed {common.span(-left)} ago", True


def run_line(run: Run, now: datetime.datetime) -> RunLine:
    """`run` (from selectors.with_current_step) as a line of the fleet."""
    state = states.of(run)
    step_type = getattr(run, "step_type", None) or ""
    step_state = getattr(run, "step_state", None) or ""
    asks = getattr(run, "step_asks", None) or ""
    # The step's `with.message` is annotated only for a step that waits for a person.
    asks_a_person = step_state == StepRun.State.WAITING and bool(asks)
    step_name = getattr(run, "step_name", None) or ""
    stopped = step_state == StepRun.State.FAILED or run.state in Run.FINISHED
    if asks_a_person:
        why = str(asks)
    else:
        # A run that stopped says where and why; one at work, what its step is doing.
        why = messages.without_hints(run.message if stopped else selectors.why(run))
    error = (getattr(run, "step_message", None) or "") if step_state == "failed" else ""
    held = holding.held(run, now)
    holds = held is not None and held.holding
    deadline, passed = _deadline(run, now) if holds else ("-", False)
    return RunLine(
        run=run,
        state=state,
        moment=common.moment(run),
        step=f"{step_name} ({step_type})" if step_name else "-",
        why=why,
        asks_a_person=asks_a_person,
        error="" if error in why else error,
        held_for=held.span(now) if held is not None and holds else "",
        held_since=held.times() if held is not None and holds else "",
        holds_nothing="" if holds else holding.never_holds(run) or (held.ended_by if held else ""),
        deadline=deadline,
        deadline_passed=passed,
        stalled=_stalled(run, now),
    )


def _stalled(run: Run, now: datetime.datetime) -> str:
    found = stalls.of_annotated(run, now)
    if found is None:
        return ""
    return stalls.wording(found["step"], found["for"], found["normal"])


def cluster_row(cluster: fleet.HeldCluster, now: datetime.datetime) -> ClusterRow:
    since = holding.Held(cluster.since, None)
    return ClusterRow(
        cluster=cluster,
        held_for=since.span(now),
        held_since=since.times(),
        lines=[run_line(run, now) for run in cluster.runs],
    )


def _page_number(query: QueryDict) -> int:
    try:
        return max(1, int(query.get("page", "1")))
    except ValueError:
        return 1


def _link(filters: fleet.FleetFilter, **changes: Any) -> str:
    values = {**dataclasses.asdict(filters), **changes}
    return "?" + urlencode({k: v for k, v in values.items() if v})


def active_bypasses(now: datetime.datetime, actor: access.Actor) -> list[bypasses.Shown]:
    """The bypasses in force (hook calls answered without runs) that `actor` sees, for the
    banner: one query."""
    return [bypasses.shown(b) for b in bypasses.active(now, actor=actor)]


def _tiles(filters: fleet.FleetFilter, counts: dict[str, int]) -> dict[str, Any]:
    """The figures on top, each with the link that filters the fleet to it."""
    held_view = {"view": fleet.HELD, "page": ""}
    apart_view = {"view": fleet.BACKGROUND, "page": ""}
    return {
        "held": (counts.get("held", 0), _link(filters, state="", **held_view)),
        "stalled": counts.get("stalled", 0),
        "held_by": [
            (
                s,
                s.label,
                counts.get(f"held_{s.value}", 0),
                _link(filters, state=s.value, **held_view),
            )
            for s in fleet.HOLDING_STATES
        ],
        "held_hooks": [
            (hook, counts.get(f"hook_{hook}", 0), _link(filters, hook=hook, state="", **held_view))
            for hook in holding.blocking_hooks()
            if counts.get(f"hook_{hook}", 0)
        ],
        "background": sum(counts.get(f"background_{s.value}", 0) for s in fleet.BACKGROUND_STATES),
        "background_link": _link(filters, state="", **apart_view),
        "background_by": [
            (s, s.label, n, _link(filters, state=s.value, **apart_view))
            for s in fleet.BACKGROUND_STATES
            if (n := counts.get(f"background_{s.value}", 0))
        ],
    }


#: The most different messages a wave's row shows; the rest are counted.
SAYS_SHOWN = 2


def rollouts_shown(actor: access.Actor, filters: fleet.FleetFilter) -> list[dict[str, Any]]:
    """The rollouts under way as the page shows them: what halts each (without the commands,
    which the banner gives whole), and one row per wave of the clusters the page's filters
    find: how many, and what they wait for (the most said first)."""
    runs = filters.apply(Run.objects.all()).filter(filters.state_q())
    shown = []
    for rollout in rollouts.counted(actor, runs):
        halt = messages.without_hints(rollout.halt)
        shown.append(
            {
                "version": rollout.version,
                "state": rollout.state,
                "halt": rollout.halt,
                "halt_text": halt.split(": ", 1)[-1],
                "abandoned": rollout.abandoned,
                "waves": [
                    {
                        "template": wave.template,
                        "canaries": wave.canaries,
                        "count": wave.count,
                        "clusters_link": _link(filters, template=wave.template, view=fleet.HELD),
                        "says": wave.says[:SAYS_SHOWN],
                        "others": sum(n for _, n in wave.says[SAYS_SHOWN:]),
                    }
                    for wave in rollout.waves
                ],
            }
        )
    return shown


def fleet_view(site: admin.AdminSite, request: HttpRequest) -> TemplateResponse:
    now = timezone.now()
    actor = common.actor(request)
    filters = filters_of(request.GET)
    page = _page_number(request.GET)
    apart = filters.view == fleet.BACKGROUND
    error = ""
    rows: list[ClusterRow] = []
    lines: list[RunLine] = []
    offset = (page - 1) * PER_PAGE
    try:
        counts = fleet.counts(filters, actor=actor, now=now)
        if apart:
            found_runs = fleet.background_page(
                filters, actor=actor, now=now, offset=offset, limit=PER_PAGE
            )
            lines = [run_line(run, now) for run in found_runs]
        else:
            found_clusters = fleet.held_clusters(
                filters, actor=actor, now=now, offset=offset, limit=PER_PAGE
            )
            rows = [cluster_row(c, now) for c in found_clusters]
    except fleet.FilterError as exc:
        error, counts = str(exc), {}
    offered = [
        (a, label) for a, label in bulk_actions.ACTIONS.items() if common.may_act(request, a)
    ]
    found = counts.get("rows_background" if apart else "rows_held", 0)
    pages = max(1, math.ceil(found / PER_PAGE))
    context = {
        **site.each_context(request),
        "title": "Fleet: clusters held by hooksvc",
        # The table needs the width; the models are one click away in the header links.
        "is_nav_sidebar_enabled": False,
        "apart": apart,
        "rows": rows,
        "lines": lines,
        "tiles": _tiles(filters, counts),
        "found": found,
        "page": page,
        "pages": pages,
        "previous": _link(filters, page=page - 1) if page > 1 else "",
        "next": _link(filters, page=page + 1) if page < pages else "",
        "filters": filters,
        "filtered": any(v for k, v in dataclasses.asdict(filters).items() if k != "view"),
        "error": error,
        "choices": fleet.choices(actor=actor, now=now),
        "hooks": list(catalog.MOMENTS),
        "states": [(s.value, s.label) for s in states.State],
        "bulk_actions": offered,
        "may_act": bool(offered),
        "bypasses": active_bypasses(now, actor),
        "rollouts": [] if error else rollouts_shown(actor, filters),
        # The banner's hint runs as printed where hooksvc runs (engine/messages.py).
        "manage_py": settings.MANAGE_PY,
        "now": common.when(now),
        "links": [
            ("All runs", reverse("admin:workflows_run_changelist")),
            ("Hook calls", reverse("admin:workflows_hookcall_changelist")),
            ("Bypasses", reverse("admin:workflows_bypass_changelist")),
            ("Rollout actions", reverse("admin:workflows_rolloutaction_changelist")),
            ("Templates", reverse("admin:workflows_workflowtemplate_changelist")),
            ("Add-on profiles", reverse("admin:workflows_addonprofile_changelist")),
            # Local accounts: Django's own permission (superusers).
            *(
                [("Users", reverse("admin:auth_user_changelist"))]
                if request.user.has_perm("auth.view_user")
                else []
            ),
        ],
    }
    return TemplateResponse(
        request, "admin/workflows/fleet.html", context, status=400 if error else 200
    )
