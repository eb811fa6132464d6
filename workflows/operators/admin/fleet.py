"""The fleet view, the admin's landing page: one row per cluster held, held longest first.

Counts by honest state on top (each a filter), filters by namespace, hook, template and
label, and a form for bulk actions on the rows ticked or on everything the filter finds
(`bulk`). The rows of a page are one query whatever the fleet's size
(`selectors.fleet_page`); the counts and the filter menus are one query each. Rows, counts,
menus and the break-glass banner cover only the namespaces the person may view, and the
bulk actions offered are those their roles allow somewhere (workflows.operators.access).
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
from workflows.models import Run
from workflows.operators import access, bypasses, selectors, states
from workflows.operators import bulk as bulk_actions
from workflows.operators.admin import common

PER_PAGE = 50
#: The counts shown first on top, as the issue names them; the others follow smaller.
HEADLINE = (
    states.State.AWAITING_APPROVAL,
    states.State.RUNNING,
    states.State.FAILED,
    states.State.RELEASED,
)
FILTER_FIELDS = ("namespace", "hook", "template", "label", "state")


@dataclasses.dataclass(frozen=True)
class Row:
    """A cluster's line on the fleet view."""

    run: Run
    state: states.State
    moment: str
    others: int
    step: str
    #: The approval's own text when a person is asked, else the run's message.
    why: str
    asks_a_person: bool
    #: The current step's last error, when it failed (what a retry would start over).
    error: str
    blocked_for: str
    deadline: str
    deadline_passed: bool


def filters_of(query: QueryDict) -> selectors.FleetFilter:
    return selectors.FleetFilter(**{name: query.get(name, "").strip() for name in FILTER_FIELDS})


def _deadline(run: Run, now: datetime.datetime) -> tuple[str, bool]:
    if run.deadline_at is None:
        return "-", False
    left = (run.deadline_at - now).total_seconds()
    if left >= 0:
        return f"in {common.span(left)}", False
    return f"passed {common.span(-left)} ago", True


def row_of(run: Run, now: datetime.datetime) -> Row:
    state = states.of(run)
    step_type = getattr(run, "step_type", None) or ""
    step_state = getattr(run, "step_state", None) or ""
    asks = getattr(run, "step_asks", None) or ""
    # The step's `with.message` is annotated only for a step that waits for a person.
    asks_a_person = step_state == "waiting" and bool(asks)
    step_name = getattr(run, "step_name", None) or ""
    # `held` is 0 while the hook's answer holds the lifecycle (selectors.fleet_page).
    holding = getattr(run, "held", 1) == 0
    deadline, passed = _deadline(run, now) if holding else ("-", False)
    return Row(
        run=run,
        state=state,
        moment=common.moment(run),
        others=max(0, int(getattr(run, "cluster_runs", 1)) - 1),
        step=f"{step_name} ({step_type})" if step_name else "-",
        why=asks if asks_a_person else run.message,
        asks_a_person=asks_a_person,
        error=(getattr(run, "step_message", None) or "") if step_state == "failed" else "",
        blocked_for=common.span((now - run.created_at).total_seconds()) if holding else "-",
        deadline=deadline,
        deadline_passed=passed,
    )


def _page_number(query: QueryDict) -> int:
    try:
        return max(1, int(query.get("page", "1")))
    except ValueError:
        return 1


def _link(filters: selectors.FleetFilter, **changes: Any) -> str:
    values = {**dataclasses.asdict(filters), **changes}
    return "?" + urlencode({k: v for k, v in values.items() if v})


def active_bypasses(now: datetime.datetime, actor: access.Actor) -> list[bypasses.Shown]:
    """The bypasses in force (hook calls answered without runs) that `actor` sees, for the
    banner: one query."""
    return [bypasses.shown(b) for b in bypasses.active(now, actor=actor)]


def fleet_view(site: admin.AdminSite, request: HttpRequest) -> TemplateResponse:
    now = timezone.now()
    actor = common.actor(request)
    filters = filters_of(request.GET)
    page = _page_number(request.GET)
    error = ""
    try:
        counts = selectors.fleet_counts(filters, actor=actor, now=now)
        runs = selectors.fleet_page(
            filters, actor=actor, now=now, offset=(page - 1) * PER_PAGE, limit=PER_PAGE
        )
    except selectors.FilterError as exc:
        error, counts, runs = str(exc), {}, []
    offered = [
        (a, label) for a, label in bulk_actions.ACTIONS.items() if common.may_act(request, a)
    ]
    clusters = counts.get("clusters", 0)
    pages = max(1, math.ceil(clusters / PER_PAGE))
    all_counts = [
        (state, state.label, counts.get(state.value, 0), _link(filters, state=state.value, page=""))
        for state in states.State
        if state != states.State.SUCCEEDED
    ]
    context = {
        **site.each_context(request),
        "title": "Fleet: clusters held by hooksvc",
        # The table needs the width; the models are one click away in the header links.
        "is_nav_sidebar_enabled": False,
        "rows": [row_of(run, now) for run in runs],
        "headline": [c for c in all_counts if c[0] in HEADLINE],
        "other_counts": [c for c in all_counts if c[0] not in HEADLINE],
        "clusters": clusters,
        "page": page,
        "pages": pages,
        "previous": _link(filters, page=page - 1) if page > 1 else "",
        "next": _link(filters, page=page + 1) if page < pages else "",
        "filters": filters,
        "filtered": any(dataclasses.astuple(filters)),
        "error": error,
        "choices": selectors.fleet_choices(actor=actor, now=now),
        "hooks": list(catalog.MOMENTS),
        "states": [(s.value, s.label) for s in states.State],
        "bulk_actions": offered,
        "may_act": bool(offered),
        "bypasses": active_bypasses(now, actor),
        # The banner's hint runs as printed where hooksvc runs (engine/messages.py).
        "manage_py": settings.MANAGE_PY,
        "now": common.when(now),
        "links": [
            ("All runs", reverse("admin:workflows_run_changelist")),
            ("Hook calls", reverse("admin:workflows_hookcall_changelist")),
            ("Bypasses", reverse("admin:workflows_bypass_changelist")),
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
