"""`addon_install` and `addon_remove` against the emulator.

Install: manifests inline or from a management-cluster ConfigMap, applied with server-side
apply as `hooksvc`, waiting until Deployments, StatefulSets and DaemonSets are rolled out
(the test plays their controllers with `set_status`), and recorded as an inventory.
Remove: exactly that inventory, taken from the install step of the latest succeeded run
for the same cluster (or given), deleted in reverse order, done once each object is gone.
Helm charts have their own module, test_helm.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.steps.conftest import CLUSTER_UID, Context, run
from tests.support.kube import KubeEmulator
from workflows import errors
from workflows.models import Run, StepRun
from workflows.steps import addon_install, registry

DEPLOYMENTS = ("apps", "v1", "deployments")
ADDON: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}},
    {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "agent", "namespace": "monitoring"},
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "agent-read"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    },
    {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "agent", "namespace": "monitoring"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "agent"}}},
    },
    {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "node-agent", "namespace": "monitoring"},
        "spec": {"selector": {"matchLabels": {"app": "node-agent"}}},
    },
    {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "agent-settings"},
        "data": {"level": "info"},
    },
]
INVENTORY: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "Namespace", "namespace": None, "name": "monitoring"},
    {"apiVersion": "v1", "kind": "ServiceAccount", "namespace": "monitoring", "name": "agent"},
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "namespace": None,
        "name": "agent-read",
    },
    {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "monitoring", "name": "agent"},
    {"apiVersion": "apps/v1", "kind": "DaemonSet", "namespace": "monitoring", "name": "node-agent"},
    {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "addons", "name": "agent-settings"},
]


@pytest.fixture(autouse=True)
def addons_namespace(kube: KubeEmulator) -> None:
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "addons"}})


def roll_out(kube: KubeEmulator) -> None:
    kube.set_status(
        *DEPLOYMENTS,
        "monitoring",
        "agent",
        {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2},
    )
    kube.set_status(
        "apps",
        "v1",
        "daemonsets",
        "monitoring",
        "node-agent",
        {
            "observedGeneration": 1,
            "desiredNumberScheduled": 3,
            "updatedNumberScheduled": 3,
            "numberAvailable": 3,
        },
    )


def test_install_applies_manifests_and_is_done_when_workloads_roll_out(
    kube: KubeEmulator, context: Context
) -> None:
    params = {"manifests": ADDON, "namespace": "addons", "pollSeconds": 3}
    ctx = context("addon_install", params, step_name="addons")
    first = run(ctx)
    assert isinstance(first, registry.Poll)
    assert first.message == "waiting for 2 of 2 to roll out: Deployment monitoring/agent"
    assert first.output == {"inventory": INVENTORY}
    applies = [path for method, path in kube.requests if method == "PATCH"]
    assert len(applies) == 6
    assert all("fieldManager=hooksvc" in path for path in applies)
    deployment = kube.get_object(*DEPLOYMENTS, "monitoring", "agent")
    assert deployment is not None and deployment["spec"]["replicas"] == 2
    config = kube.get_object("", "v1", "configmaps", "addons", "agent-settings")
    assert config is not None and config["data"] == {"level": "info"}
    # A second start applies the same objects again: nothing is created twice.
    assert isinstance(run(context("addon_install", params, step_name="addons")), registry.Poll)
    assert len(kube.list_objects(*DEPLOYMENTS, "monitoring")) == 1
    kube.set_status(
        *DEPLOYMENTS,
        "monitoring",
        "agent",
        {"observedGeneration": 1, "replicas": 3, "updatedReplicas": 2, "availableReplicas": 2},
    )
    assert isinstance(run(ctx), registry.Poll), "an old replica is still running"
    roll_out(kube)
    assert run(ctx) == registry.Done({"inventory": INVENTORY})


def test_install_reads_manifests_from_a_configmap_of_the_management_cluster(
    kube: KubeEmulator, context: Context
) -> None:
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "monitoring-addon", "namespace": "addons"},
            "data": {"manifests.yaml": yaml.safe_dump_all(ADDON[:3])},
        }
    )
    ref = {"namespace": "addons", "name": "monitoring-addon", "key": "manifests.yaml"}
    done = run(context("addon_install", {"configMapRef": ref}))
    assert done == registry.Done({"inventory": INVENTORY[:3]})
    with pytest.raises(errors.PermanentError) as exc:
        run(context("addon_install", {"configMapRef": {**ref, "key": "other"}}, run_id=8))
    assert exc.value.message == "ConfigMap addons/monitoring-addon has no key other"
    with pytest.raises(errors.TemporaryError) as missing:
        run(context("addon_install", {"configMapRef": {**ref, "name": "nope"}}, run_id=9))
    assert missing.value.message == "ConfigMap addons/nope not found"


def test_install_needs_something_to_install() -> None:
    with pytest.raises(registry.ParamError) as exc:
        registry.validate("addon_install", {}, hook="AfterControlPlaneInitialized")
    assert str(exc.value) == "manifests: give manifests, configMapRef or charts"


def installed_run(inventory: list[dict[str, Any]], *, uid: str = CLUSTER_UID) -> Run:
    run_ = Run.objects.create(
        template_name="addons-on-init",
        template_generation=1,
        spec={},
        hook="AfterControlPlaneInitialized",
        cluster_key=uid,
        cluster_namespace="fleet",
        cluster_name="prod-eu-1",
        state=Run.State.SUCCEEDED,
    )
    StepRun.objects.create(
        run=run_,
        name="addons",
        position=0,
        type="addon_install",
        state=StepRun.State.SUCCEEDED,
        output={"inventory": inventory},
    )
    return run_


@pytest.mark.django_db
def test_remove_deletes_exactly_the_installed_inventory_in_reverse_order(
    kube: KubeEmulator, context: Context
) -> None:
    run(context("addon_install", {"manifests": ADDON, "namespace": "addons"}))
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "keep", "namespace": "addons"},
        }
    )
    installed_run(INVENTORY)
    installed_run(INVENTORY[:1], uid="another-cluster")
    params = {"fromTemplate": "addons-on-init", "fromStep": "addons"}
    ctx = context("addon_remove", params, hook="BeforeClusterDelete", step_name="remove")
    kube.requests.clear()
    assert run(ctx) == registry.Done({"removed": INVENTORY})
    deletes = [path for method, path in kube.requests if method == "DELETE"]
    assert [p.split("?")[0].rsplit("/", 2)[-2:] for p in deletes] == [
        ["configmaps", "agent-settings"],
        ["daemonsets", "node-agent"],
        ["deployments", "agent"],
        ["clusterroles", "agent-read"],
        ["serviceaccounts", "agent"],
        ["namespaces", "monitoring"],
    ]
    assert kube.get_object("", "v1", "namespaces", None, "monitoring") is None
    assert (
        kube.get_object("rbac.authorization.k8s.io", "v1", "clusterroles", None, "agent-read")
        is None
    )
    assert kube.get_object("", "v1", "configmaps", "addons", "keep") is not None


@pytest.mark.django_db
def test_remove_waits_until_each_object_is_gone(kube: KubeEmulator, context: Context) -> None:
    inventory = [INVENTORY[-1]]
    ctx = context("addon_remove", {"inventory": inventory}, step_name="remove")
    kube.put_object({**ADDON[-1], "metadata": {"name": "agent-settings", "namespace": "addons"}})
    ctx.memo["inventory"], ctx.memo["deleted"] = inventory, True  # deleted, held by a finalizer
    assert run(ctx) == registry.Poll(
        after=5, message="waiting for 1 objects to be gone: ConfigMap addons/agent-settings"
    )
    kube.delete_object("", "v1", "configmaps", "addons", "agent-settings")
    assert run(ctx) == registry.Done({"removed": inventory})


@pytest.mark.django_db
def test_remove_without_a_succeeded_install_has_nothing_to_remove(
    kube: KubeEmulator, context: Context
) -> None:
    params = {"fromTemplate": "addons-on-init", "fromStep": "addons"}
    before = len(kube.requests)
    outcome = run(context("addon_remove", params, step_name="remove"))
    assert outcome == registry.Done({"removed": [], "result": "nothing installed"})
    assert len(kube.requests) == before, "nothing installed: the workload is not even read"


def test_remove_needs_one_source_of_inventory() -> None:
    with pytest.raises(registry.ParamError) as exc:
        registry.validate("addon_remove", {}, hook="BeforeClusterDelete")
    assert str(exc.value) == "inventory: give either fromTemplate and fromStep, or inventory"


@pytest.mark.parametrize(
    ("kind", "spec", "status", "done"),
    [
        (
            "StatefulSet",
            {"replicas": 3},
            {"observedGeneration": 1, "updatedReplicas": 3, "readyReplicas": 3},
            True,
        ),
        (
            "StatefulSet",
            {"replicas": 3},
            {"observedGeneration": 1, "updatedReplicas": 3, "readyReplicas": 2},
            False,
        ),
        (
            "Deployment",
            {},
            {"observedGeneration": 1, "updatedReplicas": 1, "availableReplicas": 1},
            True,
        ),
        (
            "Deployment",
            {"replicas": 1},
            {"observedGeneration": 0, "updatedReplicas": 1, "availableReplicas": 1},
            False,
        ),
        (
            "DaemonSet",
            {},
            {
                "observedGeneration": 1,
                "desiredNumberScheduled": 2,
                "updatedNumberScheduled": 1,
                "numberAvailable": 2,
            },
            False,
        ),
    ],
    ids=[
        "sts ready",
        "sts not ready",
        "deploy default replicas",
        "deploy old generation",
        "ds updating",
    ],
)
def test_rolled_out_reads_the_controllers_status(
    kind: str, spec: dict[str, Any], status: dict[str, Any], done: bool
) -> None:
    obj = {"kind": kind, "metadata": {"generation": 1}, "spec": spec, "status": status}
    assert addon_install.rolled_out(obj) is done
