"""The published OpenAPI document: generated from the catalog, true to what the server does.

Covers: the document's paths (discovery and the nine hooks, with the prefix and handler
names of the configuration), that CAPI's own requests and every answer the server can
give validate against it, that retryAfterSeconds belongs to blocking hooks only, and that
the hook port serves it when the admin has its own port.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from django.test import Client, RequestFactory, override_settings

from hooksvc.contract import catalog, handlers, openapi
from hooksvc.serving import middleware
from tests.support import capi


def _validator(doc: dict[str, Any], name: str) -> jsonschema.Draft4Validator:
    # OpenAPI 3.0 schemas are a JSON Schema draft-4 dialect; refs resolve inside `doc`.
    return jsonschema.Draft4Validator({**doc, "$ref": f"#/components/schemas/{name}"})


def test_the_document_has_discovery_and_the_nine_hooks() -> None:
    doc = openapi.document()
    assert doc["openapi"].startswith("3.")
    assert sorted(doc["paths"]) == sorted(
        [capi.DISCOVERY_PATH] + [capi.hook_path(hook) for hook in catalog.HOOKS]
    )
    assert all(list(item) == ["post"] for item in doc["paths"].values())


def test_the_paths_follow_the_prefix_and_handler_names() -> None:
    overrides = json.dumps({"BeforeClusterUpgrade": {"name": "backup"}})
    with override_settings(HOOKS_PATH_PREFIX="ext", HOOKS_HANDLERS=overrides):
        paths = openapi.document()["paths"]
    assert capi.hook_path("BeforeClusterUpgrade", "backup", prefix="/ext") in paths
    assert capi.DISCOVERY_PATH not in paths


@pytest.mark.parametrize("hook", list(catalog.HOOKS))
def test_retry_after_seconds_is_required_on_blocking_hooks_only(hook: str) -> None:
    schema = openapi.document()["components"]["schemas"][f"{hook}Response"]
    blocking = catalog.HOOKS[hook].blocking
    assert ("retryAfterSeconds" in schema["properties"]) is blocking
    assert ("retryAfterSeconds" in schema["required"]) is blocking


@pytest.mark.parametrize(
    "cluster", [capi.cluster_v1beta2(), capi.cluster_v1beta1()], ids=["v1beta2", "v1beta1"]
)
@pytest.mark.parametrize("hook", list(catalog.HOOKS))
def test_capi_requests_and_every_kind_of_answer_validate(hook: str, cluster: Any) -> None:
    doc = openapi.document()
    _validator(doc, f"{hook}Request").validate(capi.hook_request(hook, cluster))
    responses = _validator(doc, f"{hook}Response")
    for status in catalog.Status:
        for retry_after in (0, 30):
            responses.validate(catalog.response(catalog.HOOKS[hook], status, "why", retry_after))


def test_a_request_missing_a_required_field_does_not_validate() -> None:
    request = capi.hook_request("BeforeClusterUpgrade")
    del request["toKubernetesVersion"]
    validator = _validator(openapi.document(), "BeforeClusterUpgradeRequest")
    assert not validator.is_valid(request)


def test_the_discovery_answer_validates() -> None:
    doc = openapi.document()
    body = {
        "apiVersion": catalog.API_VERSION,
        "kind": "DiscoveryResponse",
        "status": "Success",
        "handlers": [h.discovery_entry() for h in handlers.configured()],
    }
    _validator(doc, "DiscoveryResponse").validate(body)


def test_get_openapi_json_serves_the_document(client: Client) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.json() == openapi.document()
    assert client.post("/openapi.json").status_code == 405


class _Socket:
    def __init__(self, port: int) -> None:
        self.port = port

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


@pytest.mark.parametrize(("port", "expected"), [(9443, 200), (8443, 404)])
def test_with_an_admin_port_the_document_is_on_the_hook_port_only(port: int, expected: int) -> None:
    request = RequestFactory().get("/openapi.json")
    request.META["gunicorn.socket"] = _Socket(port)
    with override_settings(ADMIN_PORT=8443):
        guard = middleware.PortSplitMiddleware(openapi.view)
        assert guard(request).status_code == expected
