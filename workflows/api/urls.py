"""The API's routes, under /api/v1/ (hooksvc.urls includes them); any other path under
/api/ is a `not_found` problem rather than the admin's HTML page."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, URLResolver, include, path, re_path
from django.views.decorators.csrf import csrf_exempt
from rest_framework import routers

from workflows.api import (
    bypasses,
    clusters,
    definitions,
    fleet,
    me,
    openapi,
    problems,
    rollouts,
    runs,
)

PREFIX = "api/v1/"

router = routers.SimpleRouter()
router.register("runs", runs.RunViewSet, basename="run")
router.register("bypasses", bypasses.BypassViewSet, basename="bypass")
router.register("rollouts", rollouts.RolloutViewSet, basename="rollout")
router.register("templates", definitions.TemplateViewSet, basename="template")
router.register("profiles", definitions.ProfileViewSet, basename="profile")


# Exempt: it changes nothing, and a POST to a wrong path must get this answer, not the
# CSRF middleware's HTML page.
@csrf_exempt
def unknown(request: HttpRequest) -> JsonResponse:
    problem = problems.body(
        "not_found",
        "no such path in the API (paths end with /; see /api/v1/openapi.json)",
        request.path,
    )
    return JsonResponse(problem, status=404, content_type=problems.MEDIA_TYPE)


urlpatterns: list[URLPattern | URLResolver] = [
    path(f"{PREFIX}openapi.json", openapi.DocumentView.as_view(), name="api-openapi"),
    path(f"{PREFIX}me/", me.MeView.as_view(), name="api-me"),
    path(f"{PREFIX}fleet/", fleet.FleetView.as_view(), name="api-fleet"),
    path(f"{PREFIX}fleet/counts/", fleet.FleetCountsView.as_view(), name="api-fleet-counts"),
    path(f"{PREFIX}fleet/background/", fleet.BackgroundView.as_view(), name="api-fleet-background"),
    re_path(
        rf"^{PREFIX}clusters/(?P<namespace>{clusters.NAMESPACE})/(?P<name>{clusters.NAME})/why/$",
        clusters.WhyView.as_view(),
        name="api-cluster-why",
    ),
    path(PREFIX, include(router.urls)),
    re_path(r"^api/", unknown),
]
