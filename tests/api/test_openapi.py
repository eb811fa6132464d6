"""The REST API's OpenAPI document: generated from the code, served at /api/v1/openapi.json
without a credential, equal to the checked-in docs/api-openapi.json (`make openapi`
regenerates it), valid OpenAPI 3; and the API lives on the admin port when there is one."""

from __future__ import annotations

import json

import pytest
from django.test import RequestFactory, override_settings
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from hooksvc.serving import middleware
from tests.support.servers import ROOT

CHECKED_IN = ROOT / "docs" / "api-openapi.json"

pytestmark = pytest.mark.django_db


def test_the_served_document_is_the_checked_in_one() -> None:
    served = APIClient().get("/api/v1/openapi.json")
    assert served.status_code == 200
    assert served["Content-Type"].startswith("application/vnd.oai.openapi+json")
    assert json.loads(served.content) == json.loads(CHECKED_IN.read_text()), (
        "the API changed: run `make openapi` and commit docs/api-openapi.json"
    )


def test_the_document_is_valid_openapi_and_describes_every_error_as_a_problem() -> None:
    document = json.loads(CHECKED_IN.read_text())
    validate_schema(document)  # type: ignore[no-untyped-call]
    assert set(document["components"]["securitySchemes"]) == {"bearer", "session"}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert list(response["content"]) == ["application/problem+json"], (
                        path,
                        method,
                        status,
                    )


class _Socket:
    def __init__(self, port: int) -> None:
        self.port = port

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


@pytest.mark.parametrize(("port", "expected"), [(8443, 200), (9443, 404)])
def test_with_an_admin_port_the_api_is_on_the_admin_port_only(port: int, expected: int) -> None:
    """hooksvc/serving/middleware.py: every path but the hooks' (and the probes) belongs to
    the admin port, which a NetworkPolicy opens only to operators."""
    request = RequestFactory().get("/api/v1/openapi.json")
    request.META["gunicorn.socket"] = _Socket(port)
    with override_settings(ADMIN_PORT=8443):
        from django.core.handlers.wsgi import WSGIHandler

        handler = WSGIHandler()
        guard = middleware.PortSplitMiddleware(handler.get_response)  # type: ignore[arg-type]
        assert guard(request).status_code == expected
