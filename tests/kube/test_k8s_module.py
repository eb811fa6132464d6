"""workflows.kube.k8s against the API emulator: clients, error mapping, Clusters and Events.

The management cluster is the emulator, reached through the kubeconfig file named by the
KUBECONFIG_PATH setting; a workload cluster is the same emulator, reached through a
`<cluster>-kubeconfig` Secret as CAPI writes it. The emulator authenticates bearer tokens
when a test names the ones it accepts (kube-apiserver's authentication filter answers 401
"Unauthorized" otherwise: apiserver endpoints/filters/authentication.go `Unauthorized`).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from django.test import override_settings

from tests.kube.conftest import NS
from tests.support.kube import KubeEmulator
from workflows import errors
from workflows.kube import events, k8s

CLUSTER = "prod-eu-1"
#: The token of the management cluster's kubeconfig (KubeEmulator.kubeconfig).
MANAGEMENT_TOKEN = "emulator-token"


def kubeconfig_secret(kube: KubeEmulator, value: bytes, **extra: Any) -> dict[str, Any]:
    return kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{CLUSTER}-kubeconfig", "namespace": NS, **extra},
            "data": {"value": base64.b64encode(value).decode()},
        }
    )


def workload_kubeconfig(kube: KubeEmulator, host: str = "localhost", token: str = "") -> bytes:
    # The same emulator under another name, so a test can tell which kubeconfig a client has.
    config = kube.kubeconfig()
    config["clusters"][0]["cluster"]["server"] = f"http://{host}:{kube.port}"
    if token:
        config["users"][0]["user"]["token"] = token
    return yaml.safe_dump(config).encode()


def namespace_name(api: Any) -> str | None:
    found = k8s.call(k8s.core(api).read_namespace, NS)
    return found.metadata.name if found.metadata else None


def cluster(version: str) -> dict[str, Any]:
    return {
        "apiVersion": f"cluster.x-k8s.io/{version}",
        "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": NS},
        "spec": {"topology": {"version": "v1.33.0"}},
        "status": {"phase": "Provisioned"},
    }


def test_management_client_comes_from_the_kubeconfig_setting(kube: KubeEmulator) -> None:
    api = k8s.management_api()
    assert api.configuration.host == kube.url
    assert namespace_name(api) == NS
    assert kube.requests[-1] == ("GET", f"/api/v1/namespaces/{NS}")


def test_management_client_is_reused_until_the_setting_changes(
    kube: KubeEmulator, tmp_path: Path
) -> None:
    first = k8s.management_api()
    assert k8s.management_api() is first
    other = tmp_path / "other-kubeconfig"
    kube.kubeconfig(other)
    with override_settings(KUBECONFIG_PATH=other):
        assert k8s.management_api() is not first


def test_a_missing_kubeconfig_file_is_a_permanent_error_naming_the_setting(
    tmp_path: Path,
) -> None:
    """A configuration error does not heal by waiting (issue 33: the step retried "kubeconfig
    /root/.kube/config not found" for five minutes, naming no setting)."""
    missing = tmp_path / "nope"
    with (
        override_settings(KUBECONFIG_PATH=missing),
        pytest.raises(k8s.NotConfigured) as exc,
    ):
        k8s.management_api()
    assert exc.value.message == (
        f"kubeconfig {missing} not found: set HOOKSVC_KUBECONFIG to the management cluster's "
        "kubeconfig file, or run hooksvc in a Pod with a ServiceAccount"
    )
    assert isinstance(exc.value, errors.PermanentError)
    unusable = tmp_path / "unusable"
    unusable.write_text("token: s3cr3t\n  : [unclosed")
    with override_settings(KUBECONFIG_PATH=unusable), pytest.raises(k8s.NotConfigured) as exc:
        k8s.management_api()
    assert exc.value.message.startswith(f"kubeconfig {unusable} is not usable: set HOOKSVC_")
    assert "s3cr3t" not in repr(exc.value)


def test_in_a_pod_the_service_account_is_used_not_the_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No ServiceAccount token is mounted here, so choosing the in-cluster path fails.
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
    with pytest.raises(k8s.NotConfigured) as exc:
        k8s.management_api()
    assert exc.value.message == (
        "kubeconfig the in-cluster ServiceAccount is not usable: mount the Pod's "
        "ServiceAccount token (automountServiceAccountToken)"
    )


def test_workload_client_comes_from_the_cluster_kubeconfig_secret(kube: KubeEmulator) -> None:
    kubeconfig_secret(kube, workload_kubeconfig(kube))
    api = k8s.workload_api(NS, CLUSTER)
    assert api.configuration.host == f"http://localhost:{kube.port}"
    assert namespace_name(api) == NS


def test_workload_client_is_cached_and_rebuilt_after_the_secret_changes(
    kube: KubeEmulator,
) -> None:
    kubeconfig_secret(kube, workload_kubeconfig(kube))
    first = k8s.workload_api(NS, CLUSTER)
    assert k8s.workload_api(NS, CLUSTER) is first
    kubeconfig_secret(kube, workload_kubeconfig(kube, host="127.0.0.1"))
    second = k8s.workload_api(NS, CLUSTER)
    assert second.configuration.host == kube.url
    assert k8s.workload_api(NS, CLUSTER) is second
    assert namespace_name(second) == NS


def test_a_missing_kubeconfig_secret_is_unavailable_and_retryable() -> None:
    with pytest.raises(k8s.KubeconfigUnavailable) as exc:
        k8s.workload_api(NS, CLUSTER)
    assert exc.value.message == f"kubeconfig Secret {NS}/{CLUSTER}-kubeconfig not found"
    assert isinstance(exc.value, errors.TemporaryError)


@pytest.mark.parametrize(
    "content",
    [
        b"token: s3cr3t-token\n  : [unclosed",
        b"- s3cr3t-token\n",
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "Config", "users": [{"token": "s3cr3t-token"}]}
        ).encode(),
    ],
    ids=["bad yaml", "not a mapping", "no current context"],
)
def test_an_unusable_kubeconfig_secret_is_unavailable_without_its_content(
    kube: KubeEmulator, content: bytes
) -> None:
    kubeconfig_secret(kube, content)
    with pytest.raises(k8s.KubeconfigUnavailable) as exc:
        k8s.workload_api(NS, CLUSTER)
    assert (
        exc.value.message
        == f"kubeconfig Secret {NS}/{CLUSTER}-kubeconfig is not a usable kubeconfig"
    )
    assert exc.value.__cause__ is None and exc.value.__suppress_context__
    assert "s3cr3t" not in repr(exc.value)


def test_a_kubeconfig_secret_without_value_is_unavailable(kube: KubeEmulator) -> None:
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{CLUSTER}-kubeconfig", "namespace": NS},
            "data": {"other": "eA=="},
        }
    )
    with pytest.raises(k8s.KubeconfigUnavailable) as exc:
        k8s.workload_api(NS, CLUSTER)
    assert exc.value.message == f"kubeconfig Secret {NS}/{CLUSTER}-kubeconfig has no key value"


def test_a_stopped_api_server_is_unreachable_with_the_cause_chained(kube: KubeEmulator) -> None:
    api = k8s.core(k8s.management_api())
    kube.stop()
    with pytest.raises(k8s.Unreachable) as exc:
        k8s.call(api.list_namespace)
    assert exc.value.message == "API server unreachable"
    assert isinstance(exc.value, errors.TemporaryError)
    assert isinstance(exc.value.__cause__, urllib3.exceptions.MaxRetryError)


def test_every_call_has_the_module_timeout(
    kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(k8s, "REQUEST_TIMEOUT", (1.0, 0.2))
    kube.delay_next("GET", "/namespaces$", 2.0)
    with pytest.raises(k8s.Unreachable) as exc:
        k8s.call(k8s.core(k8s.management_api()).list_namespace)
    assert exc.value.message == "API server timed out"
    assert isinstance(exc.value.__cause__, urllib3.exceptions.MaxRetryError)


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (500, "API server answered 500 Internal Server Error"),
        (429, "API server answered 429 Too Many Requests"),
    ],
)
def test_server_errors_and_throttling_are_unreachable(
    kube: KubeEmulator, code: int, message: str
) -> None:
    kube.fail_next("GET", "/namespaces$", code)
    with pytest.raises(k8s.Unreachable) as exc:
        k8s.call(k8s.core(k8s.management_api()).list_namespace)
    assert (exc.value.message, exc.value.status) == (message, code)
    assert exc.value.__cause__ is not None


@pytest.mark.parametrize(
    ("code", "error", "permanent"),
    [
        (401, k8s.Unauthorized, False),
        (403, k8s.Forbidden, True),
        (422, k8s.Invalid, True),
        (400, k8s.Invalid, True),
    ],
)
def test_refusals_are_permanent_errors(
    kube: KubeEmulator, code: int, error: type[k8s.K8sError], permanent: bool
) -> None:
    kube.fail_next("GET", "/namespaces$", code)
    with pytest.raises(error) as exc:
        k8s.call(k8s.core(k8s.management_api()).list_namespace)
    assert isinstance(exc.value, errors.PermanentError) is permanent


def test_not_found_and_conflict_are_mapped_with_what_was_asked() -> None:
    api = k8s.core(k8s.management_api())
    with pytest.raises(k8s.NotFound) as missing:
        k8s.call(api.read_namespaced_config_map, "nope", NS, what="ConfigMap fleet/nope")
    assert missing.value.message == "ConfigMap fleet/nope: API server answered 404 Not Found"
    body = {"metadata": {"name": "cm"}}
    k8s.call(api.create_namespaced_config_map, NS, body)
    with pytest.raises(k8s.Conflict) as exists:
        k8s.call(api.create_namespaced_config_map, NS, body)
    assert exists.value.status == 409


def test_get_cluster_reads_v1beta2_with_its_status(kube: KubeEmulator) -> None:
    kube.put_object(cluster("v1beta2"))
    found = k8s.get_cluster(NS, CLUSTER)
    assert found["apiVersion"] == "cluster.x-k8s.io/v1beta2"
    assert found["status"] == {"phase": "Provisioned"}


def test_get_cluster_falls_back_to_v1beta1_when_v1beta2_is_not_served(kube: KubeEmulator) -> None:
    kube.undeclare("cluster.x-k8s.io", "v1beta2", "clusters")
    kube.put_object(cluster("v1beta1"))
    assert k8s.get_cluster(NS, CLUSTER)["apiVersion"] == "cluster.x-k8s.io/v1beta1"


def test_get_cluster_of_a_missing_cluster_is_not_found() -> None:
    with pytest.raises(k8s.NotFound) as exc:
        k8s.get_cluster(NS, "nope")
    assert exc.value.message == "Cluster fleet/nope: API server answered 404 Not Found"


def test_emit_event_creates_an_event_on_the_cluster_then_bumps_its_count(
    kube: KubeEmulator,
) -> None:
    story: dict[str, Any] = {
        "namespace": NS,
        "cluster_name": CLUSTER,
        "cluster_uid": "uid-1",
        "reason": "WorkflowStarted",
        "message": "workflow backup started",
    }
    events.emit_event(**story)
    name = events.event_name(CLUSTER, "WorkflowStarted", "workflow backup started")
    event = kube.get_object("", "v1", "events", NS, name)
    assert event is not None
    assert event["involvedObject"] == {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "name": CLUSTER,
        "namespace": NS,
        "uid": "uid-1",
    }
    assert (event["reason"], event["message"], event["type"], event["count"]) == (
        "WorkflowStarted",
        "workflow backup started",
        "Normal",
        1,
    )
    assert event["source"] == {"component": "hooksvc"}
    events.emit_event(**story)
    bumped = kube.get_object("", "v1", "events", NS, name)
    assert bumped is not None and bumped["count"] == 2
    assert len(kube.list_objects("", "v1", "events", NS)) == 1


def test_a_different_message_is_a_different_event(kube: KubeEmulator) -> None:
    for message in ("step 1 failed", "step 2 failed"):
        events.emit_event(
            namespace=NS,
            cluster_name=CLUSTER,
            cluster_uid="u",
            reason="WorkflowFailed",
            message=message,
            type="Warning",
        )
    recorded = kube.list_objects("", "v1", "events", NS)
    assert sorted(e["message"] for e in recorded) == ["step 1 failed", "step 2 failed"]
    assert {e["type"] for e in recorded} == {"Warning"}


# --- 401: credentials rotate ------------------------------------------------------------


def test_a_workload_client_that_gets_401_reads_its_rotated_kubeconfig_secret_once(
    kube: KubeEmulator,
) -> None:
    """A token kubeconfig is rewritten by its provider while a step holds a client
    (cluster-api-provider-aws pkg/cloud/services/eks/config.go updateCAPIKubeconfigSecret
    writes a new 15-minute token at each reconcile); client-go refreshes credentials on a
    401 (client-go transport/token_source.go tokenSourceTransport.RoundTrip,
    plugin/pkg/client/auth/exec/exec.go roundTripper.RoundTrip) instead of failing."""
    kube.accept_tokens(MANAGEMENT_TOKEN, "old-token")
    kubeconfig_secret(kube, workload_kubeconfig(kube, token="old-token"))
    api = k8s.workload_api(NS, CLUSTER)
    assert namespace_name(api) == NS
    # The provider rotates: the old token stops working, the Secret holds the new one.
    kubeconfig_secret(kube, workload_kubeconfig(kube, token="new-token"))
    kube.accept_tokens(MANAGEMENT_TOKEN, "new-token")
    assert namespace_name(api) == NS, "the held client took the new token on its 401"
    secret_reads = [p for m, p in kube.requests if m == "GET" and "-kubeconfig" in p]
    assert len(secret_reads) == 2, "one read to build the client, one after the 401"


def test_a_401_the_secret_cannot_cure_is_unauthorized_and_temporary(kube: KubeEmulator) -> None:
    """The Secret still holds the refused token (its provider has not rotated it yet): the
    call fails as Unauthorized, a temporary error, not Forbidden; the Secret is read once."""
    kube.accept_tokens(MANAGEMENT_TOKEN)
    kubeconfig_secret(kube, workload_kubeconfig(kube, token="expired-token"))
    api = k8s.workload_api(NS, CLUSTER)
    reads = sum(1 for m, p in kube.requests if m == "GET" and "-kubeconfig" in p)
    with pytest.raises(k8s.Unauthorized) as exc:
        namespace_name(api)
    assert exc.value.message == "API server answered 401 Unauthorized"
    assert isinstance(exc.value, errors.TemporaryError)
    assert sum(1 for m, p in kube.requests if m == "GET" and "-kubeconfig" in p) == reads + 1
    assert "expired-token" not in repr(exc.value)


# --- 429 and 5xx: Retry-After -------------------------------------------------------------


@pytest.mark.parametrize(
    ("retry_after", "delay"),
    [("7", 7.0), ("0", 1.0), ("3600", k8s.MAX_RETRY_AFTER_SECONDS), ("soon", None)],
)
def test_throttling_by_priority_and_fairness_sets_the_next_attempts_delay(
    kube: KubeEmulator, retry_after: str, delay: float | None
) -> None:
    """apiserver server/filters/priority-and-fairness.go answers 429 with a plain-text body
    and Retry-After (1-32 s: util/flowcontrol/dropped_requests_tracker.go); client-go
    waits it out (rest/with_retry.go checkWait, whole seconds only). hooksvc hands it to
    the engine as the TemporaryError's delay, bounded."""
    kube.throttle_next("GET", "/namespaces$", retry_after=retry_after)
    with pytest.raises(k8s.Unreachable) as exc:
        k8s.call(k8s.core(k8s.management_api()).list_namespace)
    assert (exc.value.status, exc.value.delay) == (429, delay)


@pytest.mark.parametrize(
    ("code", "headers", "details", "delay"),
    [
        (503, "5", None, 5.0),
        (503, None, {"retryAfterSeconds": 2}, 2.0),
        (500, None, None, None),
        (504, None, {"retryAfterSeconds": 1, "causes": []}, 1.0),
    ],
)
def test_a_server_error_that_says_when_to_come_back_sets_the_delay(
    kube: KubeEmulator,
    code: int,
    headers: str | None,
    details: dict[str, Any] | None,
    delay: float | None,
) -> None:
    """5xx too (client-go checkWait: `r >= 500`); a Status' details.retryAfterSeconds when no
    header says it (apimachinery pkg/api/errors SuggestsClientDelay), as a watch cache
    that is not ready answers (storage/cacher: errors.NewTooManyRequests, NewTimeoutError)."""
    kube.fail_next("GET", "/namespaces$", code, retry_after=headers, details=details)
    with pytest.raises(k8s.Unreachable) as exc:
        k8s.call(k8s.core(k8s.management_api()).list_namespace)
    assert (exc.value.status, exc.value.delay) == (code, delay)
