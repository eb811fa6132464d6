"""`addon_remove` against the emulator: exactly what an install applied, tier by tier.

The inventory comes from the install step of the latest succeeded run for the same
cluster (or is given). Custom resources go first and are waited for while their operator
still runs (`kube_apps.Operator` clears its finalizer only then), then the other objects,
then CRDs and Namespaces (the emulator's namespace controller and CRD finalizer hold them
until their content is gone). A tier not done by the step's timeout names what is stuck.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.steps.conftest import CLUSTER_UID, Context, run
from tests.steps.test_addons import ADDON, INVENTORY, entry
from tests.support.kube import KubeEmulator, eventually
from tests.support.kube_apps import Operator
from tests.support.kube_crds import definition
from workflows import errors
from workflows.models import Run, StepRun
from workflows.steps import registry

FINALIZER = "example.com/cleanup"
WIDGETS = ("example.com", "v1", "widgets")
CRD_API = "apiextensions.k8s.io/v1"
OPERATOR_ADDON: list[dict[str, Any]] = [
    definition("example.com", "Widget"),
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "widgets"}},
    {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "operator", "namespace": "widgets"},
    },
    {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "operator", "namespace": "widgets"},
        "spec": {"replicas": 1, "template": {"spec": {"image": "operator:1"}}},
    },
    {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "main", "namespace": "widgets"},
    },
]


@pytest.fixture(autouse=True)
def addons_namespace(kube: KubeEmulator) -> None:
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "addons"}})


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


def install(context: Context, manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ctx = context("addon_install", {"manifests": manifests, "waitForRollout": False})
    eventually("installed", lambda: isinstance(run(ctx), registry.Done))
    return list(ctx.memo["inventory"])


def deleted(kube: KubeEmulator) -> list[str]:
    """`plural/name` of each DELETE the emulator answered, in order."""
    paths = [p.split("?")[0] for m, p in kube.requests if m == "DELETE"]
    return ["/".join(p.rsplit("/", 2)[-2:]) for p in paths]


@pytest.mark.django_db
def test_custom_resources_go_first_while_their_operator_runs_then_it_then_crds_and_namespaces(
    kube: KubeEmulator, context: Context
) -> None:
    """apiextensions-apiserver pkg/controller/finalizer/crd_finalizer.go: a deleted CRD waits
    until its instances are gone, and their finalizers need their operator (kube_apps.
    Operator, which runs while its Deployment does); kubernetes pkg/controller/namespace/
    deletion/namespaced_resources_deleter.go: a Namespace waits for its content. Deleting
    the operator first would leave the Widgets, the CRD and the Namespace stuck."""
    kube.add_controller(Operator("example.com", "widgets", FINALIZER, "widgets/operator", 0.3))
    inventory = install(context, OPERATOR_ADDON)
    user_made = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "mine"}}
    kube.put_object({**user_made, "metadata": {"name": "mine", "namespace": "default"}})
    eventually("operator finalizers", lambda: all(
        w["metadata"].get("finalizers") == [FINALIZER] for w in kube.list_objects(*WIDGETS)
    ))  # fmt: skip
    kube.requests.clear()
    ctx = context("addon_remove", {"inventory": inventory, "pollSeconds": 1}, step_name="remove")
    first = run(ctx)
    assert first == registry.Poll(
        after=1,
        message="removing custom resources: waiting for 2 to be gone: "
        f"Widget widgets/main (finalizers: {FINALIZER})",
        output={
            "removing": "custom resources",
            "remaining": [
                f"Widget widgets/main (finalizers: {FINALIZER})",
                f"Widget default/mine (finalizers: {FINALIZER})",
            ],
        },
    )
    assert deleted(kube) == ["widgets/mine", "widgets/main"]
    eventually("removed", lambda: isinstance(run(ctx), registry.Done))
    assert deleted(kube) == [
        "widgets/mine", "widgets/main",
        "deployments/operator", "serviceaccounts/operator",
        "namespaces/widgets", "customresourcedefinitions/widgets.example.com",
    ]  # fmt: skip
    assert run(ctx) == registry.Done({"removed": inventory})
    assert kube.get_object("", "v1", "namespaces", None, "widgets") is None
    assert kube.get_object("apiextensions.k8s.io", "v1", "customresourcedefinitions", None,
                           "widgets.example.com") is None  # fmt: skip


@pytest.mark.django_db
def test_a_tier_not_done_by_the_timeout_fails_naming_what_is_stuck_and_its_finalizers(
    kube: KubeEmulator, context: Context
) -> None:
    """The finalizers page of the Kubernetes documentation: an object whose finalizer nobody
    removes stays, marked for deletion. With no operator running, the Widget stays; the
    step fails before its timeout, naming it and the finalizer."""
    inventory = install(context, OPERATOR_ADDON)
    held = {"name": "main", "namespace": "widgets", "finalizers": [FINALIZER]}
    kube.put_object({**OPERATOR_ADDON[-1], "metadata": held})
    ctx = context("addon_remove", {"inventory": inventory, "pollSeconds": 5}, step_name="remove")
    now = datetime.datetime.now(datetime.UTC)
    ctx.deadline = now + datetime.timedelta(seconds=6)
    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert 2 < waiting.after <= 3, "the last look comes before the timeout"
    ctx.deadline = now + datetime.timedelta(seconds=2)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        "custom resources not gone within the step's timeout: "
        f"Widget widgets/main (finalizers: {FINALIZER})"
    )
    assert kube.get_object("apps", "v1", "deployments", "widgets", "operator"), "not touched"


@pytest.mark.django_db
def test_a_namespace_held_by_content_outside_the_inventory_says_what_holds_it(
    kube: KubeEmulator, context: Context
) -> None:
    """namespaced_resources_deleter.go: NamespaceContentRemaining and
    NamespaceFinalizersRemaining tell what a terminating Namespace still holds."""
    inventory = install(context, [ADDON[0]])
    other = {"name": "left", "namespace": "monitoring", "finalizers": ["example.com/hold"]}
    kube.put_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": other})
    ctx = context("addon_remove", {"inventory": inventory}, step_name="remove")
    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert waiting.message == (
        "removing CustomResourceDefinitions and Namespaces: waiting for 1 to be gone: "
        "Namespace monitoring (finalizers: kubernetes; Some resources are remaining: "
        "configmaps. has 1 resource instances; Some content in the namespace has finalizers "
        "remaining: example.com/hold in 1 resource instances)"
    )
    kube.delete_object("", "v1", "configmaps", "monitoring", "left")
    eventually("gone", lambda: isinstance(run(ctx), registry.Done))


@pytest.mark.django_db
def test_remove_deletes_exactly_the_installed_inventory(
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
    eventually("removed", lambda: run(ctx) == registry.Done({"removed": INVENTORY}))
    assert deleted(kube) == [
        "deployments/agent", "daemonsets/node-agent", "clusterroles/agent-read",
        "configmaps/agent-settings", "serviceaccounts/agent", "namespaces/monitoring",
    ]  # fmt: skip
    assert kube.get_object("", "v1", "namespaces", None, "monitoring") is None
    assert kube.get_object("", "v1", "configmaps", "addons", "keep") is not None


@pytest.mark.django_db
def test_an_object_made_again_after_its_deletion_is_deleted_again(
    kube: KubeEmulator, context: Context
) -> None:
    inventory = [entry("ConfigMap", "agent-settings", "addons")]
    settings = {**ADDON[-1], "metadata": {"name": "agent-settings", "namespace": "addons"}}
    kube.put_object({**settings, "metadata": {**settings["metadata"], "finalizers": ["x/y"]}})
    ctx = context("addon_remove", {"inventory": inventory}, step_name="remove")
    held = "ConfigMap addons/agent-settings (finalizers: x/y)"
    assert run(ctx) == registry.Poll(
        after=5,
        message=f"removing objects: waiting for 1 to be gone: {held}",
        output={"removing": "objects", "remaining": [held]},
    )
    kube.delete_object("", "v1", "configmaps", "addons", "agent-settings")
    kube.put_object(settings)  # made again by someone
    assert isinstance(run(ctx), registry.Poll)
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
