"""Request parsing: both Cluster API versions give the same HookCall."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hooksvc.contract import catalog, wire
from tests.support import capi


def _parse(hook: str, body: dict[str, object]) -> wire.HookCall:
    return wire.parse_hook_call(catalog.HOOKS[hook], json.dumps(body).encode())


def test_a_v1beta2_cluster_gives_its_class_from_class_ref() -> None:
    call = _parse(
        "BeforeClusterUpgrade",
        capi.hook_request(
            "BeforeClusterUpgrade", capi.cluster_v1beta2(), settings={"profile": "strict"}
        ),
    )
    assert call.cluster == wire.Cluster(
        name="prod-eu-1",
        namespace="fleet",
        uid="6f0c2a4e-2d7b-4c61-9a1e-0f5c1d2e3a4b",
        labels={"env": "prod"},
        annotations={"owner": "platform"},
        deletion_timestamp="",
        topology_version="v1.30.0",
        class_name="quick-start",
        class_namespace="fleet",
    )
    assert (call.from_version, call.to_version, call.settings) == (
        "v1.30.0",
        "v1.33.0",
        {"profile": "strict"},
    )
    assert call.control_plane_upgrades == ("v1.31.0", "v1.32.3", "v1.33.0")
    assert call.workers_upgrades == ("v1.32.3", "v1.33.0")


def test_a_v1beta1_cluster_gives_its_class_from_topology_class() -> None:
    call = _parse(
        "AfterClusterUpgrade", capi.hook_request("AfterClusterUpgrade", capi.cluster_v1beta1())
    )
    assert (call.cluster.class_name, call.cluster.topology_version, call.version) == (
        "quick-start",
        "v1.30.0",
        "v1.33.0",
    )
    assert call.cluster.has_topology


def test_a_cluster_without_uid_is_known_by_namespace_and_name() -> None:
    cluster = capi.cluster_v1beta2()
    del cluster["metadata"]["uid"]
    call = _parse("BeforeClusterDelete", capi.hook_request("BeforeClusterDelete", cluster))
    assert call.cluster.key == "fleet/prod-eu-1"


def test_a_cluster_without_topology_has_no_class() -> None:
    cluster = capi.cluster_v1beta2()
    del cluster["spec"]["topology"]
    call = _parse("BeforeClusterDelete", capi.hook_request("BeforeClusterDelete", cluster))
    assert (call.cluster.class_name, call.cluster.has_topology) == ("", False)


def test_response_of_the_non_blocking_hook_has_no_retry_field() -> None:
    assert catalog.response(
        catalog.HOOKS["AfterControlPlaneInitialized"], catalog.Status.SUCCESS
    ) == {
        "apiVersion": catalog.API_VERSION,
        "kind": "AfterControlPlaneInitializedResponse",
        "status": "Success",
    }
    assert (
        catalog.response(
            catalog.HOOKS["BeforeClusterDelete"], catalog.Status.SUCCESS, "waiting", 2**40
        )["retryAfterSeconds"]
        == 2**31 - 1
    )


def _metadata(**fields: object) -> Any:
    return lambda r: r["cluster"]["metadata"].update(fields)


# Values of the right type that PostgreSQL cannot store, or that overflow hooksvc's columns:
# each used to reach the database and be answered "state store unavailable" (hold forever)
# or an internal error.
UNSTORABLE = [
    ("nul-in-name", _metadata(name="a\x00b"), "cluster.metadata.name must not contain NUL"),
    ("surrogate-in-name", _metadata(name="a\ud800"), "cluster.metadata.name must be valid Unicode"),
    (
        "name-too-long",
        _metadata(name="n" * 254),
        "cluster.metadata.name must be at most 253 characters",
    ),
    (
        "namespace-too-long",
        _metadata(namespace="n" * 64),
        "cluster.metadata.namespace must be at most 63 characters",
    ),
    ("uid-too-long", _metadata(uid="u" * 254), "cluster.metadata.uid must be at most 253"),
    (
        "nul-in-label-value",
        _metadata(labels={"env": "\x00"}),
        "cluster.metadata.labels.env must not contain NUL",
    ),
    (
        "surrogate-in-annotation-key",
        _metadata(annotations={"\udc00": "x"}),
        "a key of cluster.metadata.annotations must be valid Unicode",
    ),
    (
        "version-too-long",
        lambda r: r.update(toKubernetesVersion="v" * 65),
        "toKubernetesVersion must be at most 64 characters",
    ),
    (
        "nul-in-settings",
        lambda r: r.update(settings={"profile": "\x00"}),
        "settings.profile must not contain NUL",
    ),
    (
        "nul-in-plan",
        lambda r: r.update(workersUpgrades=[{"version": "v1\x00"}]),
        "workersUpgrades[0].version must not contain NUL",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "message"), UNSTORABLE, ids=[c[0] for c in UNSTORABLE])
def test_values_the_state_store_cannot_hold_are_refused(
    case: str, mutate: Any, message: str
) -> None:
    request = capi.hook_request("BeforeClusterUpgrade")
    mutate(request)
    with pytest.raises(wire.BadRequest) as raised:
        _parse("BeforeClusterUpgrade", request)
    assert str(raised.value).startswith(message)


def test_a_huge_label_key_is_cut_in_the_message() -> None:
    request = capi.hook_request("BeforeClusterCreate")
    request["cluster"]["metadata"]["labels"] = {"k" * 100_000: 1}
    with pytest.raises(wire.BadRequest) as raised:
        _parse("BeforeClusterCreate", request)
    assert str(raised.value) == f"cluster.metadata.labels.{'k' * 64}... must be a string"


def test_kubernetes_sized_values_are_accepted() -> None:
    request = capi.hook_request("BeforeClusterUpgrade", toKubernetesVersion="v" * 64)
    request["cluster"]["metadata"].update(name="n" * 253, namespace="s" * 63, uid="u" * 253)
    call = _parse("BeforeClusterUpgrade", request)
    assert (len(call.cluster.name), len(call.cluster.namespace)) == (253, 63)
