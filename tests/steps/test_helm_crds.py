"""A chart that ships a custom resource and its CRD: the real helm 3.17 against the emulator.

The chart is tests/steps/charts/widgets: the Widget CRD in its crds/ directory, an
operator's Deployment and a Widget in its templates. The emulator's `kube_apps.Operator`
puts its finalizer on Widgets and clears it only while its Deployment runs, as an operator
does. Removal deletes the chart's Widget first, while the operator runs, then uninstalls
the release; an install waits for what an earlier removal left terminating (the release's
namespace, the chart's CRD) instead of letting helm fail on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.steps import test_helm
from tests.steps.conftest import Context, run
from tests.steps.test_helm import NS, releases
from tests.support.kube import KubeEmulator, eventually
from tests.support.kube_apps import Operator
from tests.support.kube_crds import definition
from workflows import errors
from workflows.steps import registry

CHART = str(Path(__file__).parent / "charts" / "widgets")
FINALIZER = "example.com/cleanup"
CRD = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
WIDGETS = ("example.com", "v1", "widgets")
DEPLOYMENTS = ("apps", "v1", "deployments")


def widgets_chart(**fields: Any) -> dict[str, Any]:
    return {"release": "demo", "chart": CHART, "namespace": NS, **fields}


def install(context: Context, run_id: int = 7, **fields: Any) -> registry.StepContext:
    params = {"charts": [widgets_chart(**fields)], "waitForRollout": False}
    return context("addon_install", params, step_name="addons", run_id=run_id)


def deleted(kube: KubeEmulator) -> list[str]:
    """`plural/name` of each DELETE the emulator answered, in order."""
    paths = [p.split("?")[0] for m, p in kube.requests if m == "DELETE"]
    return ["/".join(p.rsplit("/", 2)[-2:]) for p in paths]


@pytest.mark.django_db
def test_remove_deletes_the_charts_custom_resource_first_then_uninstalls_the_release(
    kube: KubeEmulator, context: Context
) -> None:
    """helm v3.17.3 and v4.1 pkg/action/install.go `installCRDs` (crds/ created before the
    templates) and uninstall.go `deleteRelease` (the templates' objects deleted; crds/ never);
    pkg/kube/client.go `rdelete` (a 404 on delete is ignored). The Widget is in the
    release's manifest: removal deletes it in the custom resources tier, while its operator
    still clears its finalizer, and only then uninstalls the release (operator, release
    records). It used to skip every object of a release there and wait for the Widget
    forever, holding BeforeClusterDelete."""
    operator = Operator("example.com", "widgets", FINALIZER, f"{NS}/demo-operator", 0.3)
    kube.add_controller(operator)
    done = run(install(context))
    assert isinstance(done, registry.Done)
    inventory = done.output["inventory"]
    assert inventory == [
        {"helmRelease": "demo", "namespace": NS},
        {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": NS,
         "name": "demo-operator", "helmRelease": "demo"},
        {"apiVersion": "example.com/v1", "kind": "Widget", "namespace": NS,
         "name": "demo-main", "helmRelease": "demo"},
    ]  # fmt: skip
    eventually("the operator's finalizer", lambda: (kube.get_object(
        *WIDGETS, NS, "demo-main") or {})["metadata"].get("finalizers") == [FINALIZER])  # fmt: skip
    kube.requests.clear()
    remove = context("addon_remove", {"inventory": inventory, "pollSeconds": 1}, step_name="rm")
    held = f"Widget {NS}/demo-main (finalizers: {FINALIZER})"
    assert run(remove) == registry.Poll(
        after=1,
        message=f"removing custom resources: waiting for 1 to be gone: {held}",
        output={"removing": "custom resources", "remaining": [held]},
    )
    assert deleted(kube) == ["widgets/demo-main"], "the Widget first, while its operator runs"
    eventually("removed", lambda: run(remove) == registry.Done({"removed": inventory}))
    assert "deployments/demo-operator" in deleted(kube)
    assert kube.list_objects(*WIDGETS) == []
    assert kube.get_object(*DEPLOYMENTS, NS, "demo-operator") is None
    assert releases(kube) == []
    assert kube.get_object(*CRD, None, "widgets.example.com") is not None, "helm keeps crds/"


def test_a_chart_waits_for_its_namespace_to_finish_terminating(
    kube: KubeEmulator, context: Context
) -> None:
    """kubernetes v1.33 pkg/registry/core/namespace/storage/storage.go (a deleted Namespace
    stays Terminating until its content is gone) and apiserver plugin/namespace/lifecycle/
    admission.go (new content refused, 403); helm v3.17.3 pkg/action/install.go
    `RunWithContext`: `--create-namespace` takes AlreadyExists as done, then storing the
    release's Secret is refused. Each attempt failed with "helm exited with code 1" and
    spent one of the step's retries; the step waits as it does for manifests, and once the
    Namespace is gone helm creates it anew."""
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    held = {"name": "held", "namespace": NS, "finalizers": ["example.com/hold"]}
    kube.put_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": held})
    kube.delete("", "v1", "namespaces", None, NS)
    ctx = test_helm.install(context)
    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert waiting.message == (
        f"waiting for namespace {NS} to finish terminating to install Helm release {NS}/demo"
    )
    assert releases(kube) == []
    kube.delete_object("", "v1", "configmaps", NS, "held")
    eventually("gone", lambda: kube.get_object("", "v1", "namespaces", None, NS) is None)
    installed = run(ctx)
    assert isinstance(installed, registry.Poll) and "roll out" in installed.message
    namespace = kube.get_object("", "v1", "namespaces", None, NS)
    assert namespace is not None and namespace["status"]["phase"] == "Active"
    assert [r["status"] for r in releases(kube)] == ["deployed"]


def test_a_first_install_waits_for_a_crd_of_the_chart_still_terminating(
    kube: KubeEmulator, context: Context
) -> None:
    """helm v3.17.3 and v4.1 pkg/action/install.go `installCRDs` skips a crds/ CRD that
    exists (AlreadyExists), so the Widget met a terminating CRD (customresource_handler.go:
    a POST answers 405) and the release failed; the next attempt upgraded it, and an
    upgrade never installs crds/ (upgrade.go): once the old CRD was gone, the kind was not
    served, for good. The step reads the chart's CRDs (`helm show crds`) and waits for a
    terminating one to go before the first install."""
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    kube.put_object(definition("example.com", "Widget"))
    eventually("served", lambda: kube.list_objects(*WIDGETS) == [])
    held = {"name": "held", "namespace": NS, "finalizers": ["example.com/hold"]}
    kube.put_object({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": held})
    kube.delete(*CRD, None, "widgets.example.com")
    ctx = install(context)
    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert waiting.message == (
        "waiting for CustomResourceDefinition widgets.example.com to finish terminating"
        f" to install Helm release {NS}/demo"
    )
    assert releases(kube) == []
    kube.delete_object(*WIDGETS, NS, "held")  # its operator is done
    eventually("the old CRD gone", lambda: kube.get_object(*CRD, None, "widgets.example.com")
               is None)  # fmt: skip
    assert isinstance(run(ctx), registry.Done)
    crd = kube.get_object(*CRD, None, "widgets.example.com")
    assert crd is not None and "deletionTimestamp" not in crd["metadata"]
    assert kube.get_object(*WIDGETS, NS, "demo-main") is not None
    assert [r["status"] for r in releases(kube)] == ["deployed"]


@pytest.mark.django_db
def test_a_release_holding_a_kind_no_longer_served_fails_removal_saying_why(
    kube: KubeEmulator, context: Context
) -> None:
    """helm v3.17.3 and v4.1 pkg/action/uninstall.go `deleteRelease`: every object of the
    release's manifest is built (pkg/kube/client.go `Build`, through discovery) before any
    is deleted, and a kind the cluster no longer serves fails the uninstall as a whole
    ("failed to delete release"), every time. Here the Widget CRD went first (another
    add-on's removal, a person): the step fails at once naming the kind, instead of
    retrying "helm exited with code 1" until its retries are spent."""
    done = run(install(context))
    assert isinstance(done, registry.Done)
    kube.delete_object(*WIDGETS, NS, "demo-main")
    kube.delete_object(*CRD, None, "widgets.example.com")
    remove = context("addon_remove", {"inventory": done.output["inventory"]}, step_name="rm")
    with pytest.raises(errors.PermanentError) as exc:
        run(remove)
    assert exc.value.message == (
        f"Helm release {NS}/demo: helm cannot uninstall it while the cluster does not serve"
        " example.com/v1 Widget (its CustomResourceDefinition was deleted first)"
    )
    assert [r["status"] for r in releases(kube)] == ["deployed"], "left as it was"
