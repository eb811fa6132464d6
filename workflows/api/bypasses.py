"""Break glass: list the bypasses the caller sees, open one, end one early, with a reason.

workflows.operators.bypasses checks and writes (the caller's right to release in the
bypass's namespace; one for every namespace needs it everywhere); its refusals of the
input (`BypassError`) are `invalid` here.
"""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from workflows import clock
from workflows.api import auth, inputs, problems, runs, shapes
from workflows.models import Bypass
from workflows.operators import bypasses


class BypassViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    lookup_value_regex = "[0-9]{1,18}"

    def get_queryset(self) -> QuerySet[Bypass]:
        found = Bypass.objects.filter(bypasses.visible(auth.actor(self.request)))
        if self.request.query_params.get("all") != "true":
            found = found.filter(ended_at__isnull=True, expires_at__gt=clock.now())
        return found.order_by("expires_at", "id")

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "all", bool, required=False, description="true: ended and expired ones too"
            )
        ],
        responses={200: shapes.Bypass(many=True), **runs.errors(400, 401, 403, 429)},
    )
    def list(self, request: Request) -> Response:
        """The bypasses in force you see (those of your namespaces, and global ones),
        expiring first first, as `workflows bypass --list -o json` lists them."""
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([bypasses.summary(b) for b in page or []])

    @extend_schema(responses={200: shapes.Bypass, **runs.errors(401, 403, 404, 429)})
    def retrieve(self, request: Request, pk: str) -> Response:
        found = Bypass.objects.filter(bypasses.visible(auth.actor(request)), pk=int(pk)).first()
        if found is None:
            raise exceptions.NotFound(f"bypass {pk} does not exist")
        return Response(bypasses.summary(found))

    @extend_schema(
        request=inputs.BypassOpen,
        responses={201: shapes.Bypass, **runs.errors(400, 401, 403, 429)},
    )
    def create(self, request: Request) -> Response:
        """Answer a hook's matching calls Success, starting no run, for a while."""
        form = inputs.BypassOpen(data=request.data)
        form.is_valid(raise_exception=True)
        values = form.validated_data
        try:
            opened = bypasses.bypass_open(
                hook=values["hook"],
                duration=bypasses.parse_duration(values["duration"]),
                selector=values.get("selector", ""),
                namespace=values.get("namespace", ""),
                actor=auth.actor(request),
                reason=values["reason"],
            )
        except bypasses.BypassError as exc:
            raise exceptions.ValidationError({"non_field_errors": [str(exc)]}) from None
        return Response(bypasses.summary(opened), status=201)

    @extend_schema(
        request=inputs.BypassEnd,
        responses={200: shapes.Bypass, **runs.errors(400, 401, 403, 404, 409, 429)},
    )
    @action(detail=True, methods=["post"])
    def end(self, request: Request, pk: str) -> Response:
        """End a bypass before it expires: matching calls start runs again."""
        form = inputs.BypassEnd(data=request.data)
        form.is_valid(raise_exception=True)
        who = auth.actor(request)
        if not Bypass.objects.filter(bypasses.visible(who), pk=int(pk)).exists():
            raise exceptions.NotFound(f"bypass {pk} does not exist")
        try:
            ended = bypasses.bypass_end(
                bypass_id=int(pk), actor=who, reason=form.validated_data["reason"]
            )
        except bypasses.BypassError as exc:
            raise problems.NotApplicable(str(exc)) from None
        return Response(bypasses.summary(ended))
