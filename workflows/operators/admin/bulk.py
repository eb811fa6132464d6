"""Bulk actions from the fleet view: choose, confirm with one reason, see each run's outcome.

The fleet's form posts an action and either the runs ticked or the filter in force; the
confirmation page lists exactly the runs that will be acted on (a filter is resolved
there, to the runs the action applies to), with what each waits for or the error a retry
would repeat, and warns of each cluster the action will not release: the other runs that
still hold it (an approval of one run leaves a cluster held by two failed ones). Confirming
runs `workflows.operators.bulk.perform`, one transaction per run. Only runs the person may
view are found, and a filter finds only those where their roles allow the action; a forged
POST naming other runs gets those refused, run by run.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from workflows.models import Run
from workflows.operators import access, actions, bulk, fleet, selectors, states
from workflows.operators.admin import common
from workflows.operators.admin import fleet as fleet_page


def _chosen(request: HttpRequest, action: str) -> tuple[list[Run], str]:
    """The runs the form names (ticked runs, or those on the filter's view, all pages, that the
    action applies to), with their display state and current step."""
    now = timezone.now()
    actor = common.actor(request)
    if request.POST.get("scope") == "filter":
        filters = fleet_page.filters_of(request.POST)
        try:
            runs = bulk.by_filter(action, filters, actor=actor, now=now)
        except fleet.FilterError as exc:
            return [], str(exc)
    else:
        ids = [int(v) for v in request.POST.getlist("run") if v.isdigit()]
        if not ids:
            return [], "Tick the runs to act on, or choose every run the filter finds."
        runs = Run.objects.filter(actor.where()).filter(pk__in=ids)
    found = list(
        selectors.with_current_step(states.annotate(runs)).order_by("created_at", "pk")[
            : bulk.LIMIT + 1
        ]
    )
    if not found:
        return [], f"No run the filter finds can take “{bulk.ACTIONS[action]}” now."
    if len(found) > bulk.LIMIT:
        return [], f"More than {bulk.LIMIT} runs: narrow the filter."
    return found, ""


@dataclasses.dataclass(frozen=True)
class ClusterWarning:
    """A cluster the action will not release: the runs that still hold it."""

    cluster: str
    #: Each run that will still hold it, with its display state.
    runs: list[tuple[Run, states.State]]


def _still_held(
    runs: list[Run], actor: access.Actor, now: datetime.datetime
) -> list[ClusterWarning]:
    """The clusters of `runs` that other runs will still hold after the action (one query)."""
    names = {r.cluster_key: f"{r.cluster_namespace}/{r.cluster_name}" for r in runs}
    others = fleet.still_holding(runs, actor=actor, now=now)
    return [
        ClusterWarning(names[key], [(run, states.of(run)) for run in others[key]])
        for key in names
        if key in others
    ]


def bulk_view(site: admin.AdminSite) -> Callable[[HttpRequest], HttpResponse]:
    def view(request: HttpRequest) -> HttpResponse:
        back = reverse("admin:index")
        action = request.POST.get("action", "")
        if request.method != "POST" or action not in bulk.ACTIONS:
            messages.error(request, "Choose a bulk action on the fleet view.")
            return HttpResponseRedirect(back)
        if not common.may_act(request, action):
            messages.error(request, common.refusal(action))
            return HttpResponseRedirect(back)
        runs, problem = _chosen(request, action)
        if problem:
            messages.error(request, problem)
            return HttpResponseRedirect(back)
        title = f"{bulk.ACTIONS[action]}: {len(runs)} run{'s' if len(runs) != 1 else ''}"
        form = common.ReasonForm(request.POST if request.POST.get("confirmed") else None)
        context = {
            **site.each_context(request),
            "title": title,
            "action": action,
            "is_nav_sidebar_enabled": False,
        }
        if form.is_bound and form.is_valid():
            actor = common.actor(request)
            try:
                outcomes = bulk.perform(
                    action, [r.pk for r in runs], actor=actor, reason=form.cleaned_data["reason"]
                )
            except actions.ActionError as exc:
                messages.error(request, str(exc))
                return HttpResponseRedirect(back)
            done = sum(o.ok for o in outcomes)
            context |= {
                "title": f"{bulk.ACTIONS[action]}: {done} of {len(outcomes)} done",
                "outcomes": outcomes,
                "done": done,
                "refused": len(outcomes) - done,
                "actor": actor.name,
            }
            return TemplateResponse(request, "admin/workflows/bulk_done.html", context)
        now = timezone.now()
        context |= {
            "rows": [fleet_page.run_line(run, now) for run in runs],
            "still_held": _still_held(runs, common.actor(request), now),
            "form": form,
        }
        return TemplateResponse(request, "admin/workflows/bulk_confirm.html", context)

    return view
