"""`/me`: who the API takes the caller for, and what they may do where."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.request import Request
from rest_framework.response import Response

from workflows.api import auth, runs, shapes
from workflows.operators import access


class MeView(generics.GenericAPIView):  # type: ignore[type-arg]
    permission_classes = [auth.Authenticated]
    pagination_class = None

    @extend_schema(responses={200: shapes.Me, **runs.errors(401, 429)})
    def get(self, request: Request) -> Response:
        """The caller's name in the run history, identity, and grants (null: everywhere)."""
        who = auth.actor(request)
        caller = request.user
        scopes = {p.value: who.scope(p) for p in access.Permission}
        return Response(
            {
                "name": who.name,
                "subject": who.subject,
                "email": who.email,
                "credential": caller.credential if isinstance(caller, auth.Caller) else "",
                "grants": {p: None if s is None else sorted(s) for p, s in scopes.items()},
            }
        )
