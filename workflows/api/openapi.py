"""The API's OpenAPI document: drf-spectacular generates it from the views, their inputs
and shapes (workflows.api.shapes) and the two ways to authenticate; served at
/api/v1/openapi.json without a credential, and checked in as docs/api-openapi.json
(`make openapi` writes it; tests/api/test_openapi.py compares the two)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.renderers import OpenApiJsonRenderer
from drf_spectacular.views import SpectacularAPIView
from rest_framework import permissions


class BearerScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "workflows.api.auth.BearerAuthentication"
    name = "bearer"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "a hooksvc API token (hks_...), or a JWT of the identity provider",
        }


class SessionScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "workflows.api.auth.SessionAuthentication"
    name = "session"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "cookie",
            "name": "sessionid",
            "description": "the admin's session; writes need the X-CSRFToken header",
        }


class DocumentView(SpectacularAPIView):
    """GET /api/v1/openapi.json: the document, to anyone (it holds no data)."""

    renderer_classes = [OpenApiJsonRenderer]
    authentication_classes: list[Any] = []
    permission_classes = [permissions.AllowAny]
    throttle_classes: list[Any] = []
