"""The emulator's kube-apiserver behaviours hooksvc's client, watcher and leader rely on.

Each as kube-apiserver does it, through the official client: bearer-token authentication
(401 "Unauthorized": apiserver endpoints/filters/authentication.go `Unauthorized`);
throttling by priority and fairness (429, Retry-After, a plain-text body:
server/filters/priority-and-fairness.go and maxinflight.go `tooManyRequests`); an error
once a watch is admitted, sent as an ERROR event (storage/cacher/cacher.go Watch,
`newErrWatcher`); after an etcd restore, a watch from a resourceVersion the store has not
reached waits, then fails with 504 Timeout, cause ResourceVersionTooLarge
(storage/cacher/watch_cache.go waitUntilFreshAndBlock, storage/errors.go
NewTooLargeResourceVersionError); Leases, whose MicroTimes decode strictly
(apimachinery pkg/apis/meta/v1/micro_time.go) and whose spec is validated
(kubernetes pkg/apis/coordination/validation ValidateLeaseSpec), written with optimistic
concurrency.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiException

from tests.kube_emulator.conftest import Api
from tests.support.kube import KubeEmulator


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.value.body or "")
    return body


def raw(api: Api, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One request as the wire sees it: the client's models would re-encode (and validate)
    bodies, and its watch helper raises on ERROR events rather than show them."""
    serialized = api.param_serialize(
        method=method,
        resource_path=path,
        header_params={"Content-Type": "application/json"} if body is not None else {},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*serialized, _request_timeout=10)
    data = response.read()
    lines = [json.loads(line) for line in data.splitlines() if line.strip()]
    return response.status, lines if "watch=" in path else (lines[0] if lines else None)


def events_of(api: Api, resource_version: str) -> list[dict[str, Any]]:
    path = (
        "/api/v1/namespaces/default/configmaps"
        f"?watch=true&resourceVersion={resource_version}&timeoutSeconds=2"
    )
    status, events = raw(api, "GET", path)
    assert status == 200
    return list(events)


def test_with_tokens_named_other_bearer_tokens_are_unauthorized(
    kube: KubeEmulator, core: Api
) -> None:
    kube.accept_tokens("someone-else")
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_config_map("default")
    assert exc.value.status == 401
    assert (status_of(exc)["reason"], status_of(exc)["message"]) == ("Unauthorized", "Unauthorized")
    kube.accept_tokens("emulator-token")
    assert core.list_namespaced_config_map("default").items == []


def test_throttling_answers_429_in_plain_text_with_retry_after(
    kube: KubeEmulator, core: Api
) -> None:
    kube.throttle_next("GET", "/configmaps$", retry_after="4")
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_config_map("default")
    assert exc.value.status == 429
    assert exc.value.headers is not None and exc.value.headers["Retry-After"] == "4"
    assert exc.value.body == "Too many requests, please try again later.\n"


def test_fail_next_can_say_when_to_come_back(kube: KubeEmulator, core: Api) -> None:
    kube.fail_next("GET", "/configmaps$", 503, retry_after="9", details={"retryAfterSeconds": 9})
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_config_map("default")
    assert exc.value.headers is not None and exc.value.headers["Retry-After"] == "9"
    assert status_of(exc)["details"] == {"retryAfterSeconds": 9}


def test_a_watch_error_is_an_error_event_then_the_end_of_the_stream(
    kube: KubeEmulator, api: Api, core: Api
) -> None:
    kube.fail_next_watch("/configmaps$", 500, reason="InternalError")
    [event] = events_of(api, "1")
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (500, "InternalError")
    assert core.list_namespaced_config_map("default").items == [], "list requests unaffected"


def test_after_an_etcd_restore_a_newer_resource_version_is_too_large(
    kube: KubeEmulator, api: Api, core: Api
) -> None:
    kube.fresh_wait_seconds = 0.2
    before = kube.snapshot()
    made = core.create_namespaced_config_map("default", {"metadata": {"name": "after"}})
    kube.restore(before)
    assert core.list_namespaced_config_map("default").items == [], "the restore undid it"
    [event] = events_of(api, made.metadata.resource_version)
    assert event["type"] == "ERROR"
    status = event["object"]
    assert (status["code"], status["reason"]) == (504, "Timeout")
    assert status["message"].startswith("Timeout: Too large resource version: ")
    assert status["details"] == {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }


def test_a_watch_from_a_version_the_store_has_reached_again_is_served(
    kube: KubeEmulator, api: Api, core: Api
) -> None:
    before = kube.snapshot()
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    wanted = core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    kube.restore(before)
    # Two changes after the restore bring the store back to the watched version: the watch
    # sends what comes after it (and nothing of what the restore undid).
    for name in ("c", "d", "e"):
        metadata = {"name": name, "namespace": "default"}
        kube.put_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata})
    events = events_of(api, wanted.metadata.resource_version)
    assert [e["object"]["metadata"]["name"] for e in events] == ["e"]


def lease(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "leader"},
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": "2026-01-01T00:00:00.000000Z",
            **spec,
        },
    }


LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        # The official Python client writes a datetime without microseconds like this.
        ({"renewTime": "2026-01-01T00:00:00+00:00"}, 400),
        ({"acquireTime": "yesterday"}, 400),
        ({"leaseDurationSeconds": 0}, 422),
        ({"leaseTransitions": -1}, 422),
        ({}, 201),
    ],
)
def test_leases_are_validated_as_kube_apiserver_does(
    api: Api, spec: dict[str, Any], code: int
) -> None:
    assert raw(api, "POST", LEASES, lease(**spec))[0] == code


def test_a_lease_update_from_a_stale_read_is_a_conflict(api: Api) -> None:
    _, first = raw(api, "POST", LEASES, lease())
    _, renewed = raw(api, "GET", f"{LEASES}/leader")
    renewed["spec"]["holderIdentity"] = "b"
    assert raw(api, "PUT", f"{LEASES}/leader", renewed)[0] == 200
    first["spec"]["holderIdentity"] = "c"
    status, answer = raw(api, "PUT", f"{LEASES}/leader", first)
    assert (status, answer["reason"]) == (409, "Conflict")
    assert raw(api, "GET", f"{LEASES}/leader")[1]["spec"]["holderIdentity"] == "b"
