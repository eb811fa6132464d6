"""URL routes: the Runtime SDK endpoints (under an optional prefix), the admin, the operator
REST API, probes, metrics."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path

from hooksvc.contract import catalog, openapi
from hooksvc.serving import health, scrape, views
from workflows.operators import oidc

_prefix = f"{settings.HOOKS_PATH_PREFIX}/" if settings.HOOKS_PATH_PREFIX else ""
_hooks = f"{_prefix}{catalog.GROUP}/{catalog.VERSION}/"

urlpatterns: list[URLPattern | URLResolver] = [
    path(f"{_hooks}{catalog.DISCOVERY_PATH_SEGMENT}", views.discovery),
    path(f"{_hooks}<str:hook_segment>/<str:handler_name>", views.lifecycle_hook),
    path(openapi.PATH.lstrip("/"), openapi.view),
    # Single sign-on (workflows/operators/oidc.py): register
    # https://<admin host>/admin/oidc/callback/ as the client's redirect URI.
    path("admin/oidc/login/", oidc.login, name="oidc_login"),
    path("admin/oidc/callback/", oidc.callback, name="oidc_callback"),
    path("admin/", admin.site.urls),
    # The operator REST API (workflows/api/, docs/api.md).
    path("", include("workflows.api.urls")),
    path("healthz", health.healthz),
    path("readyz", health.readyz),
    path("metrics", scrape.metrics),
]
