"""`addon_install` against the emulator: staged apply, waits, and rollouts as upstream has them.

Manifests inline or from a management-cluster ConfigMap are applied with server-side apply
as `hooksvc`: CustomResourceDefinitions and Namespaces first, until each CRD is
established and served and each Namespace active, then the rest in Helm's install order,
recorded as an inventory. What is not there yet (a kind, a namespace) is waited for; a
conflict is retried. Rollouts follow `kubectl rollout status`, with the emulator's
workload controllers (`kube_apps`) writing the statuses. Removal is test_addon_remove.py;
Helm charts test_helm.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.steps.conftest import Context, run
from tests.support.kube import KubeEmulator, eventually
from tests.support.kube_apps import AppsControllers
from tests.support.kube_crds import definition
from workflows import errors
from workflows.steps import registry

DEPLOYMENTS = ("apps", "v1", "deployments")
CRD = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")


def deployment(name: str, namespace: str = "monitoring", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}},
            **spec,
        },
    }


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
    deployment("agent"),
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


def entry(kind: str, name: str, namespace: str | None, api: str = "v1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "namespace": namespace, "name": name}


#: Namespace first, then Helm's install order: ServiceAccount, ConfigMap, ClusterRole,
#: DaemonSet, Deployment.
INVENTORY: list[dict[str, Any]] = [
    entry("Namespace", "monitoring", None),
    entry("ServiceAccount", "agent", "monitoring"),
    entry("ConfigMap", "agent-settings", "addons"),
    entry("ClusterRole", "agent-read", None, "rbac.authorization.k8s.io/v1"),
    entry("DaemonSet", "node-agent", "monitoring", "apps/v1"),
    entry("Deployment", "agent", "monitoring", "apps/v1"),
]
WIDGET_CRD = definition("example.com", "Widget")
WIDGET = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {"name": "default-widget", "namespace": "monitoring"},
    "spec": {"size": 3},
}


@pytest.fixture(autouse=True)
def addons_namespace(kube: KubeEmulator) -> None:
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "addons"}})


def established(kube: KubeEmulator, name: str) -> bool:
    crd = kube.get_object(*CRD, None, name) or {}
    return any(c["type"] == "Established" and c["status"] == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])  # fmt: skip


def applied(kube: KubeEmulator) -> list[str]:
    """The kinds and names applied so far, in order."""
    return [p.split("?")[0].rsplit("/", 2)[-2] for m, p in kube.requests if m == "PATCH"]


def test_install_applies_manifests_in_stages_and_is_done_when_workloads_roll_out(
    kube: KubeEmulator, context: Context
) -> None:
    """Order: fluxcd/pkg ssa/manager_apply.go ApplyAllStaged (Namespaces and CRDs first),
    helm pkg/releaseutil/kind_sorter.go InstallOrder (then by kind). Rollout:
    kubectl pkg/polymorphichelpers/rollout_status.go, with kube_apps' controllers."""
    kube.add_controller(AppsControllers(ready_after=0.3, nodes=3))
    params = {"manifests": ADDON, "namespace": "addons", "pollSeconds": 3}
    ctx = context("addon_install", params, step_name="addons")
    first = run(ctx)
    assert isinstance(first, registry.Poll)
    assert first.message == "waiting for 2 of 2 to roll out: DaemonSet monitoring/node-agent"
    assert first.output == {"inventory": INVENTORY}
    assert applied(kube) == [
        "namespaces", "serviceaccounts", "configmaps", "clusterroles", "daemonsets", "deployments",
    ]  # fmt: skip
    assert all(
        "fieldManager=hooksvc" in path for method, path in kube.requests if method == "PATCH"
    )
    config = kube.get_object("", "v1", "configmaps", "addons", "agent-settings")
    assert config is not None and config["data"] == {"level": "info"}
    # A second start applies the same objects again: nothing is created twice.
    assert isinstance(run(context("addon_install", params, step_name="addons")), registry.Poll)
    assert len(kube.list_objects(*DEPLOYMENTS, "monitoring")) == 1
    eventually("the rollout", lambda: isinstance(run(ctx), registry.Done))
    assert run(ctx) == registry.Done({"inventory": INVENTORY})


def test_a_priority_class_is_applied_before_the_workloads_that_name_it(
    kube: KubeEmulator, context: Context
) -> None:
    """helm v4.1.4 (05fa3797) pkg/release/v1/util/kind_sorter.go InstallOrder, and v3.17.3
    (e4da4978) pkg/releaseutil/kind_sorter.go: PriorityClass first of all. A Pod naming a
    PriorityClass that does not exist is refused (kubernetes plugin/pkg/admission/priority
    admission.go), so a Deployment applied first makes pods that cannot be created until
    it comes. INSTALL_ORDER lacked PriorityClass, and put it last with the unknown kinds."""
    priority = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "addon-critical"},
        "value": 1000000,
    }
    agent = deployment("agent", priorityClassName="addon-critical")
    manifests = [ADDON[0], agent, ADDON[1], priority]
    run(context("addon_install", {"manifests": manifests, "waitForRollout": False}))
    assert applied(kube) == ["namespaces", "priorityclasses", "serviceaccounts", "deployments"]


def test_custom_resources_wait_until_their_definition_is_established_and_served(
    kube: KubeEmulator, context: Context
) -> None:
    """apiextensions-apiserver: naming_controller.go and establishing_controller.go set
    NamesAccepted then Established; customresource_discovery_controller.go lists the kind
    only once established (kube_crds, with a delay). Applying the Widget right after its CRD
    would meet a kind the server does not serve yet."""
    kube.set_crd_establish_delay(0.5)
    manifests = [WIDGET, deployment("widget-operator"), WIDGET_CRD, ADDON[0]]
    ctx = context("addon_install", {"manifests": manifests, "waitForRollout": False})
    first = run(ctx)
    assert first == registry.Poll(
        after=1,
        message="waiting for CustomResourceDefinition widgets.example.com to be established",
        output={
            "inventory": [
                entry(
                    "CustomResourceDefinition", "widgets.example.com", None,
                    "apiextensions.k8s.io/v1",
                ),
                entry("Namespace", "monitoring", None),
            ]
        },
    )  # fmt: skip
    assert applied(kube) == ["customresourcedefinitions", "namespaces"]
    second = run(ctx)
    assert isinstance(second, registry.Poll) and second.after == 2, "backs off"

    eventually("the CRD established", lambda: established(kube, "widgets.example.com"))
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert [e["kind"] for e in done.output["inventory"]] == [
        "CustomResourceDefinition", "Namespace", "Deployment", "Widget",
    ]  # fmt: skip
    widget = kube.get_object("example.com", "v1", "widgets", "monitoring", "default-widget")
    assert widget is not None and widget["spec"] == {"size": 3}


def test_a_crd_whose_names_another_crd_holds_fails_the_step(
    kube: KubeEmulator, context: Context
) -> None:
    """apiextensions-apiserver pkg/controller/status/naming_controller.go
    `calculateNamesAndConditions`: names another CRD of the group has accepted (here its
    singular, kind and list kind; the last conflict checked is the reason) give NamesAccepted
    False, and Established stays False: waiting cannot help (kube_crds models it)."""
    kube.put_object(copy.deepcopy(WIDGET_CRD))
    eventually("established", lambda: established(kube, "widgets.example.com"))
    clash = definition("example.com", "Widget", plural="gadgets")
    with pytest.raises(errors.PermanentError) as exc:
        eventually("refused", lambda: not isinstance(
            run(context("addon_install", {"manifests": [clash]})), registry.Poll))  # fmt: skip
    assert exc.value.message == (
        "CustomResourceDefinition gadgets.example.com: names not accepted (ListKindConflict)"
    )


def test_a_kind_no_manifest_defines_is_waited_for_with_a_growing_interval(
    kube: KubeEmulator, context: Context
) -> None:
    """An operator that installs its own CRD at start: customresource_discovery_controller.go
    lists the kind once it is established; until then the Widget waits (polls 1, 2, 4 s)."""
    ctx = context("addon_install", {"manifests": [ADDON[0], WIDGET], "waitForRollout": False})
    waits = [run(ctx) for _ in range(3)]
    assert [(w.after, w.message) for w in waits if isinstance(w, registry.Poll)] == [
        (after, "waiting for the API server to serve example.com/v1 Widget") for after in (1, 2, 4)
    ]
    kube.put_object(copy.deepcopy(WIDGET_CRD))  # what the operator's start would create
    eventually("served", lambda: isinstance(run(ctx), registry.Done))
    assert kube.get_object("example.com", "v1", "widgets", "monitoring", "default-widget")


def test_a_namespace_still_terminating_from_an_earlier_removal_is_waited_for(
    kube: KubeEmulator, context: Context
) -> None:
    """kubernetes pkg/registry/core/namespace/storage/storage.go: a deleted Namespace stays
    Terminating until the namespace controller removed its content; apiserver
    plugin/namespace/lifecycle/admission.go refuses new content in it (403,
    NamespaceTerminating). The install waits, then creates the Namespace anew."""
    for name in ("monitoring", "old"):
        kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        held = {"name": "held", "namespace": name, "finalizers": ["example.com/hold"]}
        kube.put_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": held})
        kube.delete("", "v1", "namespaces", None, name)
    settings = {**ADDON[-1], "metadata": {"name": "agent-settings", "namespace": "monitoring"}}
    elsewhere = {**ADDON[-1], "metadata": {"name": "agent-settings", "namespace": "old"}}
    ctx = context("addon_install", {"manifests": [ADDON[0], settings, elsewhere]})
    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert waiting.message == "waiting for Namespace monitoring to finish terminating"
    kube.delete_object("", "v1", "configmaps", "monitoring", "held")
    eventually(
        "monitoring gone", lambda: not kube.get_object("", "v1", "namespaces", None, "monitoring")
    )
    refused = run(ctx)
    assert isinstance(refused, registry.Poll)
    assert refused.message == (
        "waiting for namespace old to finish terminating to apply ConfigMap agent-settings"
    )
    namespace = kube.get_object("", "v1", "namespaces", None, "monitoring")
    assert namespace is not None and namespace["status"]["phase"] == "Active", "created anew"
    kube.delete_object("", "v1", "configmaps", "old", "held")
    eventually("old gone", lambda: not kube.get_object("", "v1", "namespaces", None, "old"))
    missing = run(ctx)
    assert isinstance(missing, registry.Poll)
    assert missing.message == "waiting for namespace old to exist to apply ConfigMap agent-settings"


def test_a_crd_still_terminating_from_an_earlier_removal_is_waited_for_then_made_anew(
    kube: KubeEmulator, context: Context
) -> None:
    """kubernetes v1.33 apiextensions-apiserver pkg/registry/customresourcedefinition/etcd.go
    (a deleted CRD keeps Established and gets Terminating) and pkg/controller/finalizer/
    crd_finalizer.go `sync` (every instance deleted, then the CRD): a Widget applied into it
    would go with it (pkg/apiserver/customresource_handler.go refuses only a POST; the
    server-side apply creates, kube_crds). The install waits until the old CRD is gone, then
    applies it anew and the Widget."""
    kube.put_object(copy.deepcopy(ADDON[0]))
    kube.put_object(copy.deepcopy(WIDGET_CRD))
    eventually("established", lambda: established(kube, "widgets.example.com"))
    held = {"name": "old", "namespace": "monitoring", "finalizers": ["example.com/hold"]}
    kube.put_object({**WIDGET, "metadata": held})
    kube.delete(*CRD, None, "widgets.example.com")
    ctx = context("addon_install", {"manifests": [WIDGET_CRD, WIDGET], "waitForRollout": False})
    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert waiting.message == (
        "waiting for CustomResourceDefinition widgets.example.com to finish terminating"
    )
    assert kube.get_object("example.com", "v1", "widgets", "monitoring", "default-widget") is None
    kube.delete_object("example.com", "v1", "widgets", "monitoring", "old")  # its operator's
    eventually("the old CRD gone", lambda: kube.get_object(*CRD, None, "widgets.example.com")
               is None)  # fmt: skip
    eventually("installed", lambda: isinstance(run(ctx), registry.Done))
    crd = kube.get_object(*CRD, None, "widgets.example.com")
    assert crd is not None and "deletionTimestamp" not in crd["metadata"]
    widget = kube.get_object("example.com", "v1", "widgets", "monitoring", "default-widget")
    assert widget is not None and widget["spec"] == {"size": 3}


def test_a_conflict_on_apply_is_a_temporary_error(kube: KubeEmulator, context: Context) -> None:
    """A 409 on server-side apply (another writer in between) is worth another attempt."""
    kube.fail_next("PATCH", "/configmaps/", 409)
    ctx = context("addon_install", {"manifests": [ADDON[-1]], "namespace": "addons"})
    with pytest.raises(errors.TemporaryError) as exc:
        run(ctx)
    assert exc.value.message == (
        "apply /api/v1/namespaces/addons/configmaps/agent-settings: changed concurrently"
    )
    assert isinstance(run(ctx), registry.Done)


def test_a_deployment_past_its_progress_deadline_fails_the_step(
    kube: KubeEmulator, context: Context
) -> None:
    """kubectl rollout_status.go: a Progressing condition with reason ProgressDeadlineExceeded
    is an error; the deployment controller sets it (pkg/controller/deployment/progress.go,
    kube_apps with a stuck Deployment)."""
    kube.add_controller(AppsControllers(stuck=["monitoring/agent"], deadline_seconds=0.2))
    ctx = context("addon_install", {"manifests": [ADDON[0], deployment("agent")]})
    assert isinstance(run(ctx), registry.Poll)

    def failed() -> bool:
        try:
            run(ctx)
        except errors.PermanentError as exc:
            assert exc.message == (
                "Deployment monitoring/agent did not roll out: ProgressDeadlineExceeded"
            )
            return True
        return False

    eventually("the deadline", failed)


def test_a_partitioned_statefulset_is_done_at_replicas_minus_partition_and_ondelete_is_not_waited(
    kube: KubeEmulator, context: Context
) -> None:
    """kubectl rollout_status.go: with rollingUpdate.partition the rollout is complete once
    replicas - partition pods are updated; OnDelete strategies have no rollout status.
    kube_apps replaces only pods from the partition up, and none for OnDelete."""
    kube.add_controller(AppsControllers())
    partitioned = {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}
    sets: list[dict[str, Any]] = [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "monitoring"},
            "spec": {"replicas": 3, "updateStrategy": strategy, "template": {"spec": spec}},
        }
        for name, strategy in (("db", partitioned), ("cache", {"type": "OnDelete"}))
        for spec in [{"image": "v1"}]
    ]
    params = {"manifests": [ADDON[0], *sets], "pollSeconds": 1}
    eventually(
        "installed", lambda: isinstance(run(context("addon_install", params)), registry.Done)
    )
    upgraded = copy.deepcopy(sets)
    for item in upgraded:
        item["spec"]["template"] = {"spec": {"image": "v2"}}
    ctx = context("addon_install", {**params, "manifests": [ADDON[0], *upgraded]}, run_id=8)
    eventually("upgraded", lambda: isinstance(run(ctx), registry.Done))
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert done.output["notWaitedFor"] == [
        {**entry("StatefulSet", "cache", "monitoring", "apps/v1"),
         "reason": "updateStrategy OnDelete: not waited for"},
    ]  # fmt: skip
    db = kube.get_object("apps", "v1", "statefulsets", "monitoring", "db")
    assert db is not None and db["status"]["updatedReplicas"] == 1


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
    assert done == registry.Done({"inventory": [INVENTORY[0], INVENTORY[1], INVENTORY[3]]})
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
