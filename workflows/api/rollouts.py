"""Rollouts: the waves waiting for canaries the caller sees, and an operator's word on a
halted one (resume, abandon), with a reason.

workflows.operators.rollouts checks and writes (the release permission in every namespace,
as `manage.py workflows rollout` needs); what does not apply (nothing halts the rollout,
abandoned already) is `not_applicable` here.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from workflows.api import auth, inputs, problems, runs, shapes
from workflows.operators import rollouts


class RolloutViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    lookup_field = "version"
    # A Kubernetes version as Cluster API writes it (v1.33.0, v1.33.0+rke2r1); another
    # path is a 404, as for the other resources.
    lookup_value_regex = r"v?[0-9][0-9A-Za-z.+_-]{0,63}"

    @extend_schema(responses={200: shapes.Rollout(many=True), **runs.errors(400, 401, 403, 429)})
    def list(self, request: Request) -> Response:
        """The rollouts whose waves wait for canaries, a halted one saying what halts it, as
        `workflows rollout list -o json` lists them."""
        found = [rollouts.summary(r) for r in rollouts.overview(auth.actor(request))]
        page = self.paginate_queryset(found)
        return self.get_paginated_response(page or [])

    def _act(self, request: Request, version: str, kind: str) -> Response:
        form = inputs.RolloutReason(data=request.data)
        form.is_valid(raise_exception=True)
        act = rollouts.rollout_resume if kind == "resume" else rollouts.rollout_abandon
        try:
            done = act(
                version=version, actor=auth.actor(request), reason=form.validated_data["reason"]
            )
        except rollouts.RolloutError as exc:
            raise problems.NotApplicable(str(exc)) from None
        return Response(rollouts.action_summary(done))

    @extend_schema(
        request=inputs.RolloutReason,
        responses={200: shapes.RolloutAction, **runs.errors(400, 401, 403, 404, 409, 429)},
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, version: str) -> Response:
        """Set aside the failed canary runs that halt the rollout to this version."""
        return self._act(request, version, "resume")

    @extend_schema(
        request=inputs.RolloutReason,
        responses={200: shapes.RolloutAction, **runs.errors(400, 401, 403, 404, 409, 429)},
    )
    @action(detail=True, methods=["post"])
    def abandon(self, request: Request, version: str) -> Response:
        """Fail every gate of the rollout to this version: its clusters do not upgrade."""
        return self._act(request, version, "abandon")
