"""hooksvc's admin site: says "hooksvc", lands on the fleet, and has no dead "View site" link.

Who may enter is the permission model's question (workflows.operators.access): anyone
granted viewing somewhere, a person signed in through the identity provider as much as a
local account. The sign-in page offers single sign-on when it is configured, and the
password form while local accounts are on (HOOKSVC_LOCAL_LOGIN).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, reverse

from workflows.operators import identities
from workflows.operators.access import Permission
from workflows.operators.admin import bulk, clusters, fleet


class Site(admin.AdminSite):
    site_header = "hooksvc"
    site_title = "hooksvc"
    index_title = "Fleet"
    #: hooksvc serves no site besides the admin: no "View site" link.
    site_url = None
    login_template = "admin/workflows/login.html"

    def has_permission(self, request: HttpRequest) -> bool:
        return identities.actor_of_request(request).may(Permission.VIEW)

    def login(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "local_login": settings.LOCAL_LOGIN}
        if settings.OIDC_ISSUER:
            following = request.GET.get("next", "") or reverse("admin:index")
            context["oidc_url"] = f"{reverse('oidc_login')}?{urlencode({'next': following})}"
            context["oidc_provider"] = settings.OIDC_DISPLAY_NAME
        return super().login(request, context)

    def index(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> TemplateResponse:
        """The landing page is the fleet: every cluster held, longest first."""
        return fleet.fleet_view(self, request)

    def get_urls(self) -> list[URLPattern | URLResolver]:
        own: list[URLPattern | URLResolver] = [
            path("fleet/bulk/", self.admin_view(bulk.bulk_view(self)), name="fleet_bulk"),
            path(
                "clusters/<str:namespace>/<str:name>/",
                self.admin_view(clusters.cluster_view(self)),
                name="cluster",
            ),
        ]
        return own + super().get_urls()
