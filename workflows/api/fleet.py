"""The fleet: one row per cluster held, held longest first, and the counts by state, as the
admin's landing page reads them (workflows.operators.selectors: fleet_page, fleet_counts),
with its filters; only the namespaces the caller may view."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from workflows.api import auth, inputs, paging, runs, shapes
from workflows.operators import selectors, states

FleetRow = shapes._shape(
    "FleetRow",
    {
        "cluster": shapes.Cluster(),
        "holds": serializers.BooleanField(
            help_text="whether the run's answer holds the cluster's lifecycle now"
        ),
        "heldSince": serializers.DateTimeField(allow_null=True),
        "clusterRuns": serializers.IntegerField(help_text="the cluster's runs on the fleet"),
        "run": shapes.RunSummary(help_text="the run that has held the cluster longest"),
    },
)
FleetCounts = shapes._shape(
    "FleetCounts",
    {
        **{state: serializers.IntegerField() for state in states.State.values},
        "clusters": serializers.IntegerField(help_text="rows of the fleet with every filter"),
    },
)
FILTER_PARAMETERS = [
    OpenApiParameter(name, str, required=False, description=str(field.help_text or name))
    for name, field in inputs.FleetFilter().fields.items()
]


def _filters(request: Request) -> selectors.FleetFilter:
    form = inputs.FleetFilter(data=request.query_params)
    form.is_valid(raise_exception=True)
    return selectors.FleetFilter(**form.validated_data)


def _row(run: Any) -> dict[str, Any]:
    summary = selectors.run_summary(run)
    holds = getattr(run, "held", 1) == 0
    return {
        "cluster": summary["cluster"],
        "holds": holds,
        "heldSince": summary["createdAt"] if holds else None,
        "clusterRuns": int(getattr(run, "cluster_runs", 1)),
        "run": summary,
    }


class FleetView(generics.GenericAPIView):  # type: ignore[type-arg]
    @extend_schema(
        parameters=FILTER_PARAMETERS,
        responses={200: FleetRow(many=True), **runs.errors(400, 401, 403, 429)},
    )
    def get(self, request: Request) -> Response:
        """Clusters held (and the runs on the fleet), held longest first, one row each."""
        now = timezone.now()
        who = auth.actor(request)
        chosen = _filters(request)
        paginator = paging.Pages()
        limit = paginator.get_limit(request) or paginator.default_limit or 50
        offset = paginator.get_offset(request)
        try:
            counts = selectors.fleet_counts(chosen, actor=who, now=now)
            rows = selectors.fleet_page(chosen, actor=who, now=now, offset=offset, limit=limit)
        except selectors.FilterError as exc:
            raise exceptions.ValidationError({"filter": [str(exc)]}) from None
        # LimitOffsetPagination's own page, with the count the counts query gave.
        paginator.count, paginator.limit, paginator.offset = counts["clusters"], limit, offset
        paginator.request = request
        return paginator.get_paginated_response([_row(run) for run in rows])


class FleetCountsView(generics.GenericAPIView):  # type: ignore[type-arg]
    pagination_class = None

    @extend_schema(
        parameters=FILTER_PARAMETERS,
        responses={200: FleetCounts, **runs.errors(400, 401, 403, 429)},
    )
    def get(self, request: Request) -> Response:
        """The fleet's runs per display state (the state filter aside), and its clusters."""
        try:
            counts = selectors.fleet_counts(
                _filters(request), actor=auth.actor(request), now=timezone.now()
            )
        except selectors.FilterError as exc:
            raise exceptions.ValidationError({"filter": [str(exc)]}) from None
        return Response(counts)
