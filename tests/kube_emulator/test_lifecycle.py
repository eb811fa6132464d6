"""How objects end in the emulator: finalizers, Terminating namespaces, garbage collection.

Each behaviour is kube-apiserver's or kube-controller-manager's, named in the test's
docstring (paths in kubernetes/kubernetes), and is driven through the official client.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import ApiException

from tests.kube_emulator.conftest import Api, eventually
from tests.kube_emulator.test_emulator import status_of
from tests.support.kube import KubeEmulator

HOLD = "example.com/hold"


def config_map(name: str, namespace: str = "default", /, **meta: object) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, **meta}, "data": {"k": "v"}}


def gone(read: Any, *args: str) -> bool:
    try:
        read(*args)
    except ApiException as exc:
        return bool(exc.status == 404)
    return False


def owner_ref(owner: Any, *, block: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": block,
    }


def test_a_finalizer_holds_a_deleted_object_until_it_is_removed(core: Api) -> None:
    """apiserver pkg/registry/generic/registry/store.go: Delete with pending finalizers only
    sets deletionTimestamp (and answers the object); the update that empties the finalizers
    completes the deletion."""
    core.create_namespaced_config_map("default", config_map("held", finalizers=[HOLD]))
    answer = core.delete_namespaced_config_map("held", "default")
    # The client expects a Status, so the object it answers stays a dict.
    assert answer["metadata"]["deletionTimestamp"]
    held = core.read_namespaced_config_map("held", "default")
    assert held.metadata.finalizers == [HOLD] and held.metadata.deletion_timestamp
    core.patch_namespaced_config_map("held", "default", {"metadata": {"finalizers": []}})
    assert gone(core.read_namespaced_config_map, "held", "default")


def test_a_namespace_terminates_until_its_content_and_its_finalizers_are_gone(
    core: Api,
) -> None:
    """pkg/registry/core/namespace/storage/storage.go at kubernetes 94341df (REST.Delete:
    deletionTimestamp, phase Terminating; a second DELETE while spec.finalizers remain
    answers 200 with the Namespace as it is, since v1.17, kubernetes/kubernetes#84122: the
    emulator answered 409 Conflict, as before it);
    apiserver plugin/namespace/lifecycle/admission.go (no creates in a terminating namespace:
    403 with cause NamespaceTerminating); pkg/controller/namespace/deletion/
    namespaced_resources_deleter.go (content deleted, NamespaceContentRemaining and
    NamespaceFinalizersRemaining conditions, the `kubernetes` finalizer dropped at the end)."""
    created = core.create_namespace({"metadata": {"name": "addon"}})
    assert created.spec.finalizers == ["kubernetes"]
    assert created.status.phase == "Active"
    core.create_namespaced_config_map("addon", config_map("held", "addon", finalizers=[HOLD]))
    core.create_namespaced_secret("addon", {"metadata": {"name": "plain"}})
    core.delete_namespace("addon")
    eventually("the content deleted", lambda: gone(core.read_namespaced_secret, "plain", "addon"))
    namespace = core.read_namespace("addon")
    assert namespace.status.phase == "Terminating"
    assert namespace.metadata.deletion_timestamp is not None
    conditions = {c.type: (c.reason, c.message) for c in namespace.status.conditions}
    assert conditions["NamespaceContentRemaining"] == (
        "SomeResourcesRemain",
        "Some resources are remaining: configmaps. has 1 resource instances",
    )
    assert conditions["NamespaceFinalizersRemaining"] == (
        "SomeFinalizersRemain",
        f"Some content in the namespace has finalizers remaining: {HOLD} in 1 resource instances",
    )
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_config_map("addon", config_map("late", "addon"))
    assert refused.value.status == 403
    assert status_of(refused)["details"]["causes"][0]["reason"] == "NamespaceTerminating"
    again = core.delete_namespace("addon")  # the client expects a Status: a dict
    assert (again["metadata"]["name"], again["status"]["phase"]) == ("addon", "Terminating")
    assert again["spec"]["finalizers"] == ["kubernetes"]
    core.patch_namespaced_config_map("held", "addon", {"metadata": {"finalizers": None}})
    eventually("the namespace gone", lambda: gone(core.read_namespace, "addon"))


def test_the_initial_namespaces_cannot_be_deleted(core: Api) -> None:
    """apiserver plugin/namespace/lifecycle/admission.go: immortal namespaces."""
    with pytest.raises(ApiException) as exc:
        core.delete_namespace("default")
    assert exc.value.status == 403


def test_background_deletion_removes_the_owner_then_the_collector_its_dependents(
    core: Api,
) -> None:
    """store.go: Background adds no finalizer, so the owner goes at once;
    pkg/controller/garbagecollector/garbagecollector.go (attemptToDeleteItem): a dependent
    whose owners are all gone is deleted."""
    owner = core.create_namespaced_config_map("default", config_map("owner"))
    meta: dict[str, object] = {"ownerReferences": [owner_ref(owner)]}
    core.create_namespaced_config_map("default", config_map("dependent", **meta))
    core.delete_namespaced_config_map("owner", "default", propagation_policy="Background")
    assert gone(core.read_namespaced_config_map, "owner", "default")
    eventually(
        "the dependent collected",
        lambda: gone(core.read_namespaced_config_map, "dependent", "default"),
    )


def test_foreground_deletion_holds_the_owner_until_its_blocking_dependents_are_gone(
    core: Api,
) -> None:
    """store.go: Foreground adds the `foregroundDeletion` finalizer; garbagecollector.go
    deletes the dependents and releases the owner once no dependent with
    blockOwnerDeletion is left (processDeletingDependentsItem)."""
    owner = core.create_namespaced_config_map("default", config_map("owner"))
    blocking: dict[str, object] = {
        "ownerReferences": [owner_ref(owner, block=True)],
        "finalizers": [HOLD],
    }
    core.create_namespaced_config_map("default", config_map("blocking", **blocking))
    loose: dict[str, object] = {"ownerReferences": [owner_ref(owner)]}
    core.create_namespaced_config_map("default", config_map("loose", **loose))
    core.delete_namespaced_config_map("owner", "default", propagation_policy="Foreground")
    eventually("the loose one", lambda: gone(core.read_namespaced_config_map, "loose", "default"))
    held = core.read_namespaced_config_map("owner", "default")
    assert held.metadata.finalizers == ["foregroundDeletion"]
    assert core.read_namespaced_config_map("blocking", "default").metadata.deletion_timestamp
    core.patch_namespaced_config_map("blocking", "default", {"metadata": {"finalizers": None}})
    eventually("the owner", lambda: gone(core.read_namespaced_config_map, "owner", "default"))


def test_orphan_deletion_leaves_the_dependents_without_the_owner_reference(core: Api) -> None:
    """store.go: Orphan adds the `orphan` finalizer; garbagecollector.go (orphanDependents)
    removes the owner from its dependents' ownerReferences, then the finalizer."""
    owner = core.create_namespaced_config_map("default", config_map("owner"))
    meta: dict[str, object] = {"ownerReferences": [owner_ref(owner)]}
    core.create_namespaced_config_map("default", config_map("dependent", **meta))
    core.delete_namespaced_config_map("owner", "default", propagation_policy="Orphan")
    eventually("the owner", lambda: gone(core.read_namespaced_config_map, "owner", "default"))
    dependent = core.read_namespaced_config_map("dependent", "default")
    assert not dependent.metadata.owner_references


def test_an_object_whose_owner_never_existed_is_collected(core: Api) -> None:
    """garbagecollector.go: an ownerReference to an absent uid is dangling; with no solid
    owner left, the dependent is deleted."""
    ghost = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "ghost",
        "uid": "00000000-0000-0000-0000-000000000000",
    }
    core.create_namespaced_config_map("default", config_map("orphan", ownerReferences=[ghost]))
    eventually("collected", lambda: gone(core.read_namespaced_config_map, "orphan", "default"))


def test_the_delete_helper_follows_the_same_rules(kube: KubeEmulator) -> None:
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "held", "namespace": "default", "finalizers": [HOLD]},
        }
    )
    answer = kube.delete("", "v1", "configmaps", "default", "held")
    assert answer["metadata"]["deletionTimestamp"]
    kube.delete_object("", "v1", "configmaps", "default", "held")
    assert kube.get_object("", "v1", "configmaps", "default", "held") is None
