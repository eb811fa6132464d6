"""The Runtime SDK contract over real HTTPS, as CAPI's runtime client sees it.

Covers: discovery, all nine hooks for v1beta1 and v1beta2 Clusters with exact bodies,
CAPI's `?timeout=` query, every bad input answered as HTTP 200 `Failure`, 404 and 405,
TLS 1.2 minimum, no plain HTTP, and mutual TLS (on the hook port only, beside an admin port).
"""

from __future__ import annotations

import json
import socket
import ssl
import warnings
from pathlib import Path
from typing import Any

import pytest

from hooksvc.contract import catalog
from hooksvc.serving import devcerts
from tests.support import capi, servers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RETRY_HOOKS = [h for h in catalog.HOOKS if h != "AfterControlPlaneInitialized"]


def test_discovery_lists_the_nine_handlers(hook_server: servers.HookServer) -> None:
    status, body = hook_server.post(
        capi.DISCOVERY_PATH + "?timeout=10s",
        {"apiVersion": capi.API_VERSION, "kind": "DiscoveryRequest"},
    )
    assert status == 200
    expected_names = [
        ("before-cluster-create", "BeforeClusterCreate"),
        ("after-control-plane-initialized", "AfterControlPlaneInitialized"),
        ("before-cluster-upgrade", "BeforeClusterUpgrade"),
        ("before-control-plane-upgrade", "BeforeControlPlaneUpgrade"),
        ("after-control-plane-upgrade", "AfterControlPlaneUpgrade"),
        ("before-workers-upgrade", "BeforeWorkersUpgrade"),
        ("after-workers-upgrade", "AfterWorkersUpgrade"),
        ("after-cluster-upgrade", "AfterClusterUpgrade"),
        ("before-cluster-delete", "BeforeClusterDelete"),
    ]
    assert body == {
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": "DiscoveryResponse",
        "status": "Success",
        "handlers": [
            {
                "name": name,
                "requestHook": {
                    "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
                    "hook": hook,
                },
                "timeoutSeconds": 10,
                "failurePolicy": "Fail",
            }
            for name, hook in expected_names
        ],
    }


@pytest.mark.parametrize(
    "cluster", [capi.cluster_v1beta2(), capi.cluster_v1beta1()], ids=["v1beta2", "v1beta1"]
)
@pytest.mark.parametrize("hook", list(catalog.HOOKS))
def test_every_hook_answers_success_when_nothing_is_configured(
    hook_server: servers.HookServer, hook: str, cluster: dict[str, Any]
) -> None:
    status, body = hook_server.post(
        capi.hook_path(hook) + "?timeout=10s", capi.hook_request(hook, cluster)
    )
    expected: dict[str, Any] = {
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": f"{hook}Response",
        "status": "Success",
    }
    if hook in RETRY_HOOKS:
        expected["retryAfterSeconds"] = 0
    assert (status, body) == (200, expected)


def _failure(hook: str, message: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": f"{hook}Response",
        "status": "Failure",
        "message": message,
    }
    if hook in RETRY_HOOKS:
        body["retryAfterSeconds"] = 0
    return body


def _without(body: dict[str, Any], *path: str) -> dict[str, Any]:
    target = body
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return body


BAD_REQUESTS = [
    (
        "invalid-json",
        b'{"apiVersion": ',
        "request body is not valid JSON: Expecting value at character 15",
    ),
    ("not-an-object", b"[1, 2]", "request body must be a JSON object"),
    ("not-utf8", b'{"a": "\xff"}', "request body is not UTF-8"),
    ("empty-body", b"", "request body is not valid JSON: Expecting value at character 0"),
    (
        "duplicate-keys",
        b'{"kind": "a", "kind": "b"}',
        'request body has the key "kind" twice',
    ),
    (
        "deep-nesting",
        b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "request body is nested deeper than 64 levels",
    ),
]


@pytest.mark.parametrize(("case", "raw", "message"), BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_malformed_bodies_get_a_failure_naming_the_problem(
    hook_server: servers.HookServer, case: str, raw: bytes, message: str
) -> None:
    status, body = hook_server.post(capi.hook_path("BeforeClusterUpgrade"), raw)
    assert (status, body) == (200, _failure("BeforeClusterUpgrade", message))


def _bad(name: str, mutate: Any, message: str, hook: str = "BeforeClusterUpgrade") -> Any:
    request = capi.hook_request(hook)
    mutate(request)
    return pytest.param(hook, request, message, id=name)


INVALID_REQUESTS = [
    _bad(
        "wrong-kind",
        lambda r: r.update(kind="BeforeClusterCreateRequest"),
        "kind must be 'BeforeClusterUpgradeRequest', got \"BeforeClusterCreateRequest\"",
    ),
    _bad(
        "missing-kind",
        lambda r: r.pop("kind"),
        "kind must be 'BeforeClusterUpgradeRequest', got \"\"",
    ),
    _bad(
        "wrong-api-version",
        lambda r: r.update(apiVersion="hooks.runtime.cluster.x-k8s.io/v1beta1"),
        "apiVersion must be 'hooks.runtime.cluster.x-k8s.io/v1alpha1',"
        ' got "hooks.runtime.cluster.x-k8s.io/v1beta1"',
    ),
    _bad("missing-cluster", lambda r: r.pop("cluster"), "cluster is required"),
    _bad("cluster-not-object", lambda r: r.update(cluster="prod"), "cluster must be an object"),
    _bad(
        "missing-metadata", lambda r: r["cluster"].pop("metadata"), "cluster.metadata is required"
    ),
    _bad(
        "missing-name",
        lambda r: r["cluster"]["metadata"].pop("name"),
        "cluster.metadata.name is required",
    ),
    _bad(
        "empty-namespace",
        lambda r: r["cluster"]["metadata"].update(namespace=""),
        "cluster.metadata.namespace must not be empty",
    ),
    _bad(
        "labels-not-strings",
        lambda r: r["cluster"]["metadata"].update(labels={"env": 1}),
        "cluster.metadata.labels.env must be a string",
    ),
    _bad(
        "not-a-cluster",
        lambda r: r["cluster"].update(kind="Machine"),
        "cluster.kind must be 'Cluster', got \"Machine\"",
    ),
    _bad(
        "missing-to-version",
        lambda r: r.pop("toKubernetesVersion"),
        "toKubernetesVersion is required",
    ),
    _bad(
        "version-not-string",
        lambda r: r.update(fromKubernetesVersion=130),
        "fromKubernetesVersion must be a string",
    ),
    _bad(
        "plan-not-array",
        lambda r: r.update(controlPlaneUpgrades={"version": "v1.31.0"}),
        "controlPlaneUpgrades must be an array",
    ),
    _bad(
        "plan-step-not-object",
        lambda r: r.update(workersUpgrades=["v1.31.0"]),
        "workersUpgrades[0] must be an object",
    ),
    _bad(
        "settings-not-strings",
        lambda r: r.update(settings={"profile": ["strict"]}),
        "settings.profile must be a string",
    ),
    _bad(
        "missing-kubernetes-version",
        lambda r: r.pop("kubernetesVersion"),
        "kubernetesVersion is required",
        hook="AfterClusterUpgrade",
    ),
    _bad(
        "initialized-missing-cluster",
        lambda r: r.pop("cluster"),
        "cluster is required",
        hook="AfterControlPlaneInitialized",
    ),
]


@pytest.mark.parametrize(("hook", "request_body", "message"), INVALID_REQUESTS)
def test_invalid_requests_get_a_failure_naming_the_field(
    hook_server: servers.HookServer, hook: str, request_body: dict[str, Any], message: str
) -> None:
    status, body = hook_server.post(capi.hook_path(hook), request_body)
    assert (status, body) == (200, _failure(hook, message))


def test_unknown_fields_are_ignored(hook_server: servers.HookServer) -> None:
    request = capi.hook_request("BeforeClusterDelete")
    request["futureField"] = {"anything": [1, 2]}
    request["cluster"]["spec"]["someNewSpec"] = True
    status, body = hook_server.post(capi.hook_path("BeforeClusterDelete"), request)
    assert (status, body["status"]) == (200, "Success")


def test_a_body_over_20_mib_is_refused_without_reading_it(hook_server: servers.HookServer) -> None:
    conn = hook_server.connection()
    try:
        conn.putrequest("POST", capi.hook_path("BeforeClusterCreate"))
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(21 << 20))
        conn.endheaders()
        # Nothing of the body is sent: the answer must not wait for it.
        response = conn.getresponse()
        body = json.loads(response.read())
    finally:
        conn.close()
    assert (response.status, body) == (
        200,
        _failure("BeforeClusterCreate", "request body is larger than 20 MiB"),
    )


@pytest.mark.parametrize(
    "path",
    [
        "/hooks.runtime.cluster.x-k8s.io/v1alpha1/beforeclustercreate/not-a-handler",
        "/hooks.runtime.cluster.x-k8s.io/v1alpha1/beforenothing/before-cluster-create",
        "/hooks.runtime.cluster.x-k8s.io/v1alpha1/beforeclusterupgrade/before-cluster-create",
        "/hooks.runtime.cluster.x-k8s.io/v1beta1/discovery",
    ],
)
def test_unknown_paths_are_404(hook_server: servers.HookServer, path: str) -> None:
    status, _ = hook_server.post(path, capi.hook_request("BeforeClusterCreate"))
    assert status == 404


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_methods_other_than_post_are_405(hook_server: servers.HookServer, method: str) -> None:
    status, _ = hook_server.post(capi.hook_path("BeforeClusterCreate"), b"", method=method)
    assert status == 405
    status, _ = hook_server.post(capi.DISCOVERY_PATH, b"", method=method)
    assert status == 405


def test_discovery_refuses_a_wrong_kind(hook_server: servers.HookServer) -> None:
    status, body = hook_server.post(
        capi.DISCOVERY_PATH, {"apiVersion": capi.API_VERSION, "kind": "Nope"}
    )
    assert (status, body) == (
        200,
        {
            "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
            "kind": "DiscoveryResponse",
            "status": "Failure",
            "message": "kind must be 'DiscoveryRequest', got \"Nope\"",
        },
    )


def test_one_connection_serves_many_calls(hook_server: servers.HookServer) -> None:
    """CAPI keeps connections alive; the server must too."""
    conn = hook_server.connection()
    try:
        for _ in range(5):
            conn.request(
                "POST",
                capi.hook_path("BeforeClusterCreate"),
                json.dumps(capi.hook_request("BeforeClusterCreate")),
            )
            response = conn.getresponse()
            assert json.loads(response.read())["status"] == "Success"
        sock = conn.sock
        assert sock is not None
    finally:
        conn.close()


def test_plain_http_is_not_served(hook_server: servers.HookServer) -> None:
    with socket.create_connection((hook_server.host, hook_server.port), timeout=5) as sock:
        sock.sendall(
            b"POST /hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery HTTP/1.1\r\n"
            b"Host: x\r\nContent-Length: 0\r\n\r\n"
        )
        try:
            reply = sock.recv(4096)
        except ConnectionResetError:  # the TLS handshake failed on unread bytes: a reset
            reply = b""
    assert not reply.startswith(b"HTTP/1.1 200")


def test_tls_older_than_1_2_is_refused(hook_server: servers.HookServer) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    # Let this client offer TLS 1.0/1.1 only, which modern OpenSSL hides behind level 0.
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = ssl.TLSVersion.TLSv1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    with (
        socket.create_connection((hook_server.host, hook_server.port), timeout=5) as sock,
        pytest.raises(ssl.SSLError) as refused,
    ):
        context.wrap_socket(sock)
    assert "PROTOCOL" in refused.value.reason.upper() or "VERSION" in refused.value.reason.upper()


def test_tls_1_2_is_served(hook_server: servers.HookServer) -> None:
    context = hook_server.client_context()
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    status, body = hook_server.post(
        capi.DISCOVERY_PATH,
        {"apiVersion": capi.API_VERSION, "kind": "DiscoveryRequest"},
        context=context,
    )
    assert (status, body["status"]) == (200, "Success")


def test_mutual_tls_refuses_a_client_without_a_certificate(mtls_server: servers.HookServer) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        mtls_server.post(
            capi.DISCOVERY_PATH, {"apiVersion": capi.API_VERSION, "kind": "DiscoveryRequest"}
        )


def test_mutual_tls_refuses_a_certificate_from_another_ca(
    mtls_server: servers.HookServer, tls_files: servers.TLSFiles
) -> None:
    context = mtls_server.client_context(tls_files.stranger_cert, tls_files.stranger_key)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        mtls_server.post(
            capi.DISCOVERY_PATH,
            {"apiVersion": capi.API_VERSION, "kind": "DiscoveryRequest"},
            context=context,
        )


def test_mutual_tls_serves_a_trusted_client(
    mtls_server: servers.HookServer, tls_files: servers.TLSFiles
) -> None:
    context = mtls_server.client_context(tls_files.client_cert, tls_files.client_key)
    status, body = mtls_server.post(
        capi.DISCOVERY_PATH,
        {"apiVersion": capi.API_VERSION, "kind": "DiscoveryRequest"},
        context=context,
    )
    assert (status, body["status"], len(body["handlers"])) == (200, "Success", 9)


def _call(port: int, context: ssl.SSLContext, method: str, path: str) -> int:
    """The HTTP status of one call, on a connection of its own."""
    body = json.dumps({"apiVersion": capi.API_VERSION, "kind": "DiscoveryRequest"}).encode()
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as sock,
    ):
        sock.sendall(
            f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        return int(sock.recv(64).split()[1])


def _refusal(port: int, context: ssl.SSLContext) -> str:
    """The TLS alert the server ends the handshake with, before any HTTP.

    In TLS 1.3 the server checks the client's certificate after the client finished its
    side, so the alert is read, not raised by the handshake; the client sends nothing
    first, since a request the server leaves unread makes its close a reset that can
    overtake the alert. A server that accepted the certificate closes the connection
    without a request after HOOKSVC_REQUEST_HEAD_SECONDS: then there is no alert.
    """
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as sock,
    ):
        try:
            sock.recv(64)
        except ssl.SSLError as refused:
            return str(refused.reason)
    return "no alert: the handshake was accepted"


def test_with_mutual_tls_the_hook_port_wants_a_client_certificate_and_the_admin_port_none(
    tls_files: servers.TLSFiles, tmp_path: Path
) -> None:
    """As the chart and k8s/base run it: HOOKSVC_TLS_CLIENT_AUTH=1 with an admin port and a
    client CA of its own (HOOKSVC_TLS_CLIENT_CA_FILE, the CA that signs CAPI's controller's
    certificate). A hook call without a certificate, or with one the serving CA signed, is
    refused by the TLS handshake, before any HTTP; one with a certificate of the client CA is
    answered. The kubelet's probes and people signing in present no certificate: the admin
    port serves them, and it does not serve the hooks.

    CAPI's runtime client presents the certificate of its manager's flags
    --runtime-extension-client-cert-file and --runtime-extension-client-key-file
    (kubernetes-sigs/cluster-api be7a74148c, PR #12517: main.go, internal/runtime/client/
    client.go `httpCall`, TLS config from client-go's transport.TLSConfigFor with CertFile
    and KeyFile; core/main.go and controlplane/kubeadm/main.go at ae7ff047)."""
    client_ca, client_ca_key = devcerts.make_ca("CAPI client CA")
    capi_cert, capi_key = devcerts.issue(client_ca, client_ca_key, "capi-manager", client=True)
    files = {
        "client-ca.crt": devcerts.cert_pem(client_ca),
        "capi.crt": devcerts.cert_pem(capi_cert),
        "capi.key": devcerts.key_pem(capi_key),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    admin_port = servers.free_port()
    env = {
        "HOOKSVC_TLS_CLIENT_AUTH": "1",
        "HOOKSVC_TLS_CLIENT_CA_FILE": str(tmp_path / "client-ca.crt"),
        "HOOKSVC_ADMIN_PORT": str(admin_port),
    }
    with servers.hook_server(tls_files.server_dir, tmp_path / "log", extra_env=env) as server:
        bare = server.client_context()
        capi_client = server.client_context(tmp_path / "capi.crt", tmp_path / "capi.key")
        # Signed by the serving CA, which does not sign hook clients here.
        serving_ca_client = server.client_context(tls_files.client_cert, tls_files.client_key)
        hook = capi.DISCOVERY_PATH
        assert _call(server.port, capi_client, "POST", hook) == 200
        assert _refusal(server.port, bare) == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
        assert _refusal(server.port, serving_ca_client) == "TLSV1_ALERT_UNKNOWN_CA"
        for path in ("/healthz", "/readyz", "/admin/login/"):
            assert _call(admin_port, bare, "GET", path) == 200, path
        assert _call(admin_port, bare, "POST", hook) == 404


def test_with_mutual_tls_a_missing_client_ca_stops_the_server_before_it_listens(
    tls_files: servers.TLSFiles, tmp_path: Path
) -> None:
    """Not at the first call: a pod whose CA bundle is missing fails to start, visibly."""
    env = {
        "HOOKSVC_TLS_CLIENT_AUTH": "1",
        "HOOKSVC_TLS_CLIENT_CA_FILE": str(tmp_path / "absent.crt"),
        "HOOKSVC_ADMIN_PORT": str(servers.free_port()),
    }
    port = servers.free_port()
    process = servers.start_gunicorn(
        servers.server_env(tls_files.server_dir, port, env), tmp_path / "log"
    )
    try:
        assert process.wait(timeout=60) != 0
    finally:
        servers.stop_process(process)
    log = (tmp_path / "log").read_text()
    assert "absent.crt" in log
