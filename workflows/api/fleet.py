"""The fleet, as the admin's landing page reads it (workflows.operators.fleet): the clusters
held, held longest first, each with every run that holds it; the runs apart (those that hold
nothing: a hook CAPI does not wait for, `holdsLifecycle: false`, released, past a Proceed
deadline); and the figures the page counts. The same filters; only the namespaces the caller
may view. "Held for" is workflows.operators.holding's, as on every page and in `workflows
why`.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from workflows.api import auth, inputs, paging, runs, shapes
from workflows.engine import stalls
from workflows.models import Run
from workflows.operators import fleet, holding, selectors

HeldRun = shapes._shape(
    "HeldRun",
    {
        **shapes.RunSummary._declared_fields,  # type: ignore[attr-defined]
        "heldSince": serializers.DateTimeField(help_text="when the run began to hold"),
        "heldSeconds": serializers.IntegerField(
            help_text="how long it has held its cluster, in whole seconds"
        ),
        "heldFor": serializers.CharField(
            help_text="the same for people, as every page shows it: 12 min, since ..."
        ),
        "stalled": shapes._shape(
            "FleetStall",
            {
                "step": serializers.CharField(),
                "since": serializers.DateTimeField(help_text="when it last made progress"),
                "for": serializers.CharField(help_text="how long it has made none: 25 min"),
                "normal": serializers.CharField(help_text="its type's normal bound: 15 min"),
            },
        )(
            allow_null=True,
            help_text="its step that made no progress for longer than is normal (docs/stalls.md)",
        ),
    },
)
HeldCluster = shapes._shape(
    "HeldCluster",
    {
        "cluster": shapes.Cluster(),
        "heldSince": serializers.DateTimeField(help_text="when its longest hold began"),
        "runs": HeldRun(many=True, help_text="every run that holds it, oldest first"),
    },
)
ApartRun = shapes._shape(
    "ApartRun",
    {
        "run": shapes.RunSummary(),
        "holdsNothing": serializers.CharField(help_text="why it holds no lifecycle"),
    },
)
FleetCounts = shapes._shape(
    "FleetCounts",
    {
        name: serializers.IntegerField()
        for name in (
            "held",
            "stalled",
            "rows_held",
            "rows_background",
            *(f"held_{s}" for s in fleet.HOLDING_STATES),
            *(f"hook_{h}" for h in holding.blocking_hooks()),
            *(f"background_{s}" for s in fleet.BACKGROUND_STATES),
        )
    },
)
FILTER_PARAMETERS = [
    OpenApiParameter(name, str, required=False, description=str(field.help_text or name))
    for name, field in inputs.FleetFilter().fields.items()
]


def _filters(request: Request, view: str = fleet.HELD) -> fleet.FleetFilter:
    form = inputs.FleetFilter(data=request.query_params)
    form.is_valid(raise_exception=True)
    return fleet.FleetFilter(**form.validated_data, view=view)


def _held_run(run: Run, now: datetime.datetime) -> dict[str, Any]:
    held = holding.held(run, now)
    since = held.since if held else run.created_at
    return {
        **selectors.run_summary(run),
        "heldSince": since.isoformat(timespec="seconds"),
        "heldSeconds": int(held.seconds(now)) if held else 0,
        "heldFor": held.describe(now) if held else "",
        "stalled": stalls.of_annotated(run, now),
    }


def _page(request: Request, count: int, rows: list[dict[str, Any]]) -> Response:
    """LimitOffsetPagination's own answer, with the count the figures query gave."""
    pages = paging.Pages()
    pages.count, pages.request = count, request
    pages.limit = pages.get_limit(request) or paging.Pages.default_limit
    pages.offset = pages.get_offset(request)
    return pages.get_paginated_response(rows)


def _window(request: Request) -> tuple[int, int]:
    pages = paging.Pages()
    return pages.get_offset(request), pages.get_limit(request) or paging.Pages.default_limit


class FleetView(generics.GenericAPIView):  # type: ignore[type-arg]
    @extend_schema(
        parameters=FILTER_PARAMETERS,
        responses={200: HeldCluster(many=True), **runs.errors(400, 401, 403, 429)},
    )
    def get(self, request: Request) -> Response:
        """The clusters held, held longest first, each with every run that holds it (a
        cluster is found when one of those runs matches every filter)."""
        now, who, chosen = timezone.now(), auth.actor(request), _filters(request)
        offset, limit = _window(request)
        try:
            counts = fleet.counts(chosen, actor=who, now=now)
            found = fleet.held_clusters(chosen, actor=who, now=now, offset=offset, limit=limit)
        except fleet.FilterError as exc:
            raise exceptions.ValidationError({"filter": [str(exc)]}) from None
        rows = [
            {
                "cluster": {"namespace": c.namespace, "name": c.name, "key": c.key},
                "heldSince": c.since.isoformat(timespec="seconds"),
                "runs": [_held_run(run, now) for run in c.runs],
            }
            for c in found
        ]
        return _page(request, counts["rows_held"], rows)


class BackgroundView(generics.GenericAPIView):  # type: ignore[type-arg]
    @extend_schema(
        parameters=FILTER_PARAMETERS,
        responses={200: ApartRun(many=True), **runs.errors(400, 401, 403, 429)},
    )
    def get(self, request: Request) -> Response:
        """The runs that hold nothing (active, or ended without success in the last 24 h),
        newest first, each with why it holds nothing."""
        now, who = timezone.now(), auth.actor(request)
        chosen = _filters(request, fleet.BACKGROUND)
        offset, limit = _window(request)
        try:
            counts = fleet.counts(chosen, actor=who, now=now)
            found = fleet.background_page(chosen, actor=who, now=now, offset=offset, limit=limit)
        except fleet.FilterError as exc:
            raise exceptions.ValidationError({"filter": [str(exc)]}) from None
        rows = []
        for run in found:
            held = holding.held(run, now)
            why_not = holding.never_holds(run) or (held.ended_by if held else "")
            rows.append({"run": selectors.run_summary(run), "holdsNothing": why_not})
        return _page(request, counts["rows_background"], rows)


class FleetCountsView(generics.GenericAPIView):  # type: ignore[type-arg]
    pagination_class = None

    @extend_schema(
        parameters=FILTER_PARAMETERS,
        responses={200: FleetCounts, **runs.errors(400, 401, 403, 429)},
    )
    def get(self, request: Request) -> Response:
        """The fleet page's figures: `held` clusters, `stalled` (the clusters held by a run
        with a stalled step), `held_<state>` and `hook_<hook>` (the
        clusters held by such a run), `background_<state>` (runs that hold nothing), and the
        rows of each view with every filter (`rows_held`, `rows_background`)."""
        try:
            counts = fleet.counts(_filters(request), actor=auth.actor(request), now=timezone.now())
        except fleet.FilterError as exc:
            raise exceptions.ValidationError({"filter": [str(exc)]}) from None
        return Response(counts)
