"""A cluster's page: its runs across its life (create, each upgrade step, delete) as a timeline.

Each run is a bar on one time axis (from the cluster's first run to its last event), with
its steps and their durations; the cluster is named by namespace/name, so a cluster made
again under the same name shows its earlier life too (the UID column tells them apart).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable

from django.contrib import admin
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from workflows.models import Run, StepRun
from workflows.operators import holding, selectors, states
from workflows.operators.admin import common


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    state: str
    duration: str


@dataclasses.dataclass(frozen=True)
class Entry:
    """One run on the cluster's timeline; `left`/`width` place its bar, in percent."""

    run: Run
    state: states.State
    moment: str
    created: str
    finished: str
    ran_for: str
    #: How long it held its cluster (operators/holding.py), and from when until when.
    held_for: str
    held_times: str
    steps: list[Step]
    left: float
    width: float


def _end(run: Run, now: datetime.datetime) -> datetime.datetime:
    return run.finished_at or now


def _step(step: StepRun, now: datetime.datetime) -> Step:
    end = step.finished_at or (None if step.state in StepRun.FINISHED else now)
    return Step(step.name, step.state, common.between(step.started_at, end))


def timeline(runs: list[Run], now: datetime.datetime) -> list[Entry]:
    start = min(run.created_at for run in runs)
    released = holding.released_at_of([run.pk for run in runs if run.released])
    total = max((max(_end(run, now) for run in runs) - start).total_seconds(), 1.0)
    entries = []
    for run in runs:
        state = states.of(run)
        end = _end(run, now)
        left = 100 * (run.created_at - start).total_seconds() / total
        held = holding.held(run, now, released_at=released.get(run.pk))
        entries.append(
            Entry(
                run=run,
                state=state,
                moment=common.moment(run),
                created=common.when(run.created_at),
                finished=common.when(run.finished_at),
                ran_for=common.between(run.started_at, end),
                held_for=held.span(now) if held is not None else "holds nothing",
                held_times=held.times() if held is not None else holding.never_holds(run),
                steps=[_step(step, now) for step in run.steps.all()],
                left=round(left, 2),
                width=round(max(0.5, 100 * (end - run.created_at).total_seconds() / total), 2),
            )
        )
    return entries


def cluster_view(site: admin.AdminSite) -> Callable[..., HttpResponse]:
    def view(request: HttpRequest, namespace: str, name: str) -> HttpResponse:
        runs = selectors.cluster_runs(namespace, name, actor=common.actor(request))
        if not runs:
            raise Http404(f"no run of cluster {namespace}/{name}")
        now = timezone.now()
        context = {
            **site.each_context(request),
            "title": f"Cluster {namespace}/{name}",
            "entries": timeline(runs, now),
            "uids": len({run.cluster_key for run in runs}),
            "now": common.when(now),
        }
        return TemplateResponse(request, "admin/workflows/cluster.html", context)

    return view
