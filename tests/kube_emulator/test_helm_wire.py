"""What helm (client-go) needs of the emulator beyond the official Python client.

`/openapi/v3` in kube-apiserver's shape, whose PATCH operations take `fieldValidation` (so
helm leaves validation to the server instead of downloading `/openapi/v2`), protobuf
request bodies for Secrets (helm's release storage), and Services. Driven over the socket,
through the official client's `call_api` where it can carry the request.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from tests.support.kube import KubeEmulator

Api = Any


@pytest.fixture
def api(kubeconfig_path: Path) -> Iterator[Api]:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig_path), client_configuration=configuration
    )
    with kubernetes.client.ApiClient(configuration) as client:
        yield client


def get_json(api: Api, path: str) -> Any:
    response = api.call_api("GET", api.configuration.host + path)
    response.read()
    assert response.status == 200
    return json.loads(response.data)


def post_raw(api: Api, path: str, body: bytes, content_type: str) -> Any:
    headers = {"Content-Type": content_type, "Accept": "application/json"}
    response = api.call_api("POST", api.configuration.host + path, headers, body)
    response.read()
    return response


# --- a protobuf encoder for the tests, independent of the emulator's decoder -------------


def varint(value: int) -> bytes:
    out = b""
    while True:
        byte, value = value & 0x7F, value >> 7
        out += bytes([byte | (0x80 if value else 0)])
        if not value:
            return out


def field(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return varint(number << 3 | 2) + varint(len(data)) + data


def map_entry(number: int, key: str, value: bytes | str) -> bytes:
    return field(number, field(1, key) + field(2, value))


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version) + field(2, kind)
    return b"k8s\x00" + field(1, type_meta) + field(2, raw) + field(3, "") + field(4, "")


def release_secret() -> bytes:
    meta = (
        field(1, "sh.helm.release.v1.demo.v1")
        + map_entry(11, "owner", "helm")
        + map_entry(11, "name", "demo")
        + field(14, "example.com/hold")
    )
    secret = (
        field(1, meta) + map_entry(2, "release", b"\x00\xffgz") + field(3, "helm.sh/release.v1")
    )
    return envelope("v1", "Secret", secret)


# --- tests --------------------------------------------------------------------------------


def test_openapi_v3_lists_each_served_group_version_with_a_hashed_url(api: Api) -> None:
    index = get_json(api, "/openapi/v3")["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/cluster.x-k8s.io/v1beta2"} <= set(index)
    url = index["apis/apps/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/apps/v1?hash=")
    assert get_json(api, url)["openapi"].startswith("3.")


def test_openapi_v3_patch_operations_take_field_validation(api: Api) -> None:
    document = get_json(api, "/openapi/v3/apis/apps/v1")
    path = document["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]
    patch = path["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "apps",
        "version": "v1",
        "kind": "Deployment",
    }
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    core = get_json(api, "/openapi/v3/api/v1")["paths"]
    assert "/api/v1/namespaces/{name}" in core, "Namespaces are cluster-scoped"
    assert "/api/v1/namespaces/{namespace}/services/{name}" in core


def test_openapi_v3_of_a_group_version_not_served_is_not_found(api: Api) -> None:
    response = api.call_api("GET", api.configuration.host + "/openapi/v3/apis/example.com/v1")
    response.read()
    assert response.status == 404
    assert json.loads(response.data)["reason"] == "NotFound"


def test_openapi_v3_follows_declared_resources(kube: KubeEmulator, api: Api) -> None:
    kube.declare("example.com", "v1", "widgets", "Widget", namespaced=False)
    assert "apis/example.com/v1" in get_json(api, "/openapi/v3")["paths"]
    assert (
        "/apis/example.com/v1/widgets/{name}"
        in get_json(api, "/openapi/v3/apis/example.com/v1")["paths"]
    )


def test_a_protobuf_secret_is_created_as_its_json_form(kube: KubeEmulator, api: Api) -> None:
    response = post_raw(
        api,
        "/api/v1/namespaces/default/secrets",
        release_secret(),
        "application/vnd.kubernetes.protobuf",
    )
    assert response.status == 201
    assert json.loads(response.data)["metadata"]["name"] == "sh.helm.release.v1.demo.v1"
    stored = kube.get_object("", "v1", "secrets", "default", "sh.helm.release.v1.demo.v1")
    assert stored is not None
    assert stored["metadata"]["labels"] == {"owner": "helm", "name": "demo"}
    assert stored["metadata"]["finalizers"] == ["example.com/hold"]
    assert stored["type"] == "helm.sh/release.v1"
    assert base64.b64decode(stored["data"]["release"]) == b"\x00\xffgz"
    listed = get_json(api, "/api/v1/namespaces/default/secrets?labelSelector=owner%3Dhelm")
    assert [s["metadata"]["name"] for s in listed["items"]] == ["sh.helm.release.v1.demo.v1"]


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (
            envelope("v1", "ConfigMap", b""),
            415,
            "the emulator cannot decode v1 ConfigMap from protobuf",
        ),
        (b"{}", 400, "the protobuf body could not be decoded: no k8s protobuf envelope"),
        (
            release_secret()[:-9],
            400,
            "the protobuf body could not be decoded: truncated field",
        ),
    ],
    ids=["kind not decoded", "not protobuf", "truncated"],
)
def test_a_protobuf_body_that_cannot_be_read_is_refused_with_a_status(
    api: Api, body: bytes, code: int, message: str
) -> None:
    response = post_raw(
        api, "/api/v1/namespaces/default/secrets", body, "application/vnd.kubernetes.protobuf"
    )
    assert response.status == code
    assert json.loads(response.data)["message"] == message


def test_services_are_served(api: Api) -> None:
    core = kubernetes.client.CoreV1Api(api)
    body: Any = {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}
    created = core.create_namespaced_service("default", body)
    assert created.spec is not None
    assert [port.port for port in created.spec.ports or []] == [80]
