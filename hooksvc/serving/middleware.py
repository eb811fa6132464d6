"""Splits the hook port from the admin port when HOOKSVC_ADMIN_PORT is set.

CAPI reaches the hook port from its namespace; the admin and metrics then live on their
own port, which a NetworkPolicy can open only where chosen. The port is the socket's
own, never the Host header, which a client controls.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotFound

from hooksvc.contract import catalog, openapi

#: Paths every port serves: the probes. Every other path that is not a hook's (the admin,
#: /metrics) belongs to the admin port: monitoring scrapes where operators browse.
_PROBES = ("/healthz", "/readyz")


class PortSplitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.admin_port = settings.ADMIN_PORT

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if self.admin_port and not request.path.startswith(_PROBES):
            sock = request.META.get("gunicorn.socket")
            local_port = sock.getsockname()[1] if sock is not None else None
            # The OpenAPI document describes the hook API, so it lives beside the hooks.
            is_hook_path = f"/{catalog.GROUP}/" in request.path or request.path == openapi.PATH
            on_admin_port = local_port == self.admin_port
            if is_hook_path == on_admin_port:
                return HttpResponseNotFound()
        return self.get_response(request)
