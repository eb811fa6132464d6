"""Request parsing: both Cluster API versions give the same HookCall."""

from __future__ import annotations

import json

from hooksvc import catalog, wire
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
