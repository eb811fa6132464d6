"""hooksvc's admin site: says "hooksvc", lands on the fleet, and has no dead "View site" link."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path

from workflows.operators.admin import bulk, clusters, fleet


class Site(admin.AdminSite):
    site_header = "hooksvc"
    site_title = "hooksvc"
    index_title = "Fleet"
    #: hooksvc serves no site besides the admin: no "View site" link.
    site_url = None

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
