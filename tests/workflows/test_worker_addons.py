"""Add-ons through the real worker and the emulator: install, then remove in order.

An install whose custom resource needs a CRD the emulator establishes only after a delay,
and whose apply meets a conflict once: the worker polls until the CRD is served and
retries the conflict, and the hook proceeds once everything is applied and rolled out.

A chain top -> mid -> base (top depends on mid, mid on base) with top and base
`EnforceRemovePolicies`, mid `RemovePolicies`, and an independent `LeavePolicies` profile.
CAPI calls AfterControlPlaneInitialized (the worker installs each profile's ConfigMap), then
BeforeClusterDelete: the hook holds until the enforced removals are done; the emulator's
request log shows top deleted before mid before base, each removal deleting exactly what
its install applied, and the left profile untouched.

(Named to run after test_outages.py: that module expects no worker to be running yet.)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.addons.profiles import NAMESPACE, apply, profile
from tests.steps.conftest import CLUSTER, CLUSTER_UID, NS, put_kubeconfig_secret
from tests.support import capi, servers
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator
from tests.support.kube_apps import AppsControllers
from tests.support.kube_crds import definition
from tests.support.worker import Worker
from workflows.engine import transitions
from workflows.models import Run, RunEvent, StepRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def call_hook(server: servers.HookServer, hook: str) -> dict[str, Any]:
    cluster = capi.cluster_v1beta2(name=CLUSTER, namespace=NS, uid=CLUSTER_UID)
    status, body = server.post(capi.hook_path(hook), capi.hook_request(hook, cluster))
    assert status == 200, body
    return body


def wait_for(what: str, predicate: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(0.3)


def states(hook: str) -> dict[str, str]:
    return dict(Run.objects.filter(hook=hook).values_list("template_name", "state"))


def test_profiles_install_in_order_and_removal_holds_and_runs_in_reverse_order(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator, tmp_path: Path
) -> None:
    for ns in (NS, NAMESPACE):
        kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    put_kubeconfig_secret(kube)
    apply(
        tmp_path,
        profile("top", behaviour="EnforceRemovePolicies", depends_on=["mid"]),
        profile("mid", behaviour="RemovePolicies", depends_on=["base"]),
        profile("base", behaviour="EnforceRemovePolicies"),
        profile("kept", behaviour="LeavePolicies"),
    )
    assert call_hook(hook_server, "AfterControlPlaneInitialized")["status"] == "Success"
    installs = {f"addon-install-{p}": "succeeded" for p in ("top", "mid", "base", "kept")}
    wait_for("the installs", lambda: states("AfterControlPlaneInitialized") == installs)
    names = [o["metadata"]["name"] for o in kube.list_objects("", "v1", "configmaps", NAMESPACE)]
    assert names == ["base", "kept", "mid", "top"]
    # Each install starts only once the one it depends on has finished.
    started = {
        r.template_name: r.started_at
        for r in Run.objects.filter(hook="AfterControlPlaneInitialized")
    }
    order = sorted(("base", "mid", "top"), key=lambda p: str(started[f"addon-install-{p}"]))
    assert order == ["base", "mid", "top"]

    first = call_hook(hook_server, "BeforeClusterDelete")
    assert (first["status"], first["retryAfterSeconds"]) == ("Success", 1)
    wait_for(
        "the deletion to proceed",
        lambda: call_hook(hook_server, "BeforeClusterDelete")["retryAfterSeconds"] == 0,
    )
    assert states("BeforeClusterDelete") == {
        "addon-remove-top": "succeeded",
        "addon-remove-mid": "succeeded",
        "addon-remove-base": "succeeded",
    }
    deletes = [path.split("?")[0] for method, path in kube.requests if method == "DELETE"]
    assert deletes == [
        f"/api/v1/namespaces/{NAMESPACE}/configmaps/{p}" for p in ("top", "mid", "base")
    ]
    names = [o["metadata"]["name"] for o in kube.list_objects("", "v1", "configmaps", NAMESPACE)]
    assert names == ["kept"]
    for name in ("top", "mid", "base"):
        installed = StepRun.objects.get(run__template_name=f"addon-install-{name}").output
        removed = StepRun.objects.get(run__template_name=f"addon-remove-{name}").output
        assert removed == {"removed": installed["inventory"]}, name


def test_an_install_waits_out_a_slow_crd_and_retries_a_conflict_across_attempts(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator
) -> None:
    """apiextensions-apiserver establishing_controller.go and
    customresource_discovery_controller.go (a CRD served only once Established, here 2 s
    after it is created: kube_crds); kubectl rollout_status.go with kube_apps' deployment
    controller; a 409 on server-side apply is retried by the engine."""
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    put_kubeconfig_secret(kube)
    kube.set_crd_establish_delay(2)
    kube.add_controller(AppsControllers(ready_after=0.5))
    kube.fail_next("PATCH", "/widgets/", 409)
    operator = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "widget-operator", "namespace": "widgets"},
        "spec": {"replicas": 1, "template": {"spec": {"image": "operator:1"}}},
    }
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "main", "namespace": "widgets"},
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "widgets"}}
    manifests = [widget, operator, definition("example.com", "Widget"), namespace]
    step = {
        "name": "install",
        "type": "addon_install",
        "with": {"manifests": manifests, "pollSeconds": 1},
    }
    wf.template(
        "addons-on-init", hook="AfterControlPlaneInitialized", retryAfterSeconds=1, steps=[step]
    )
    assert call_hook(hook_server, "AfterControlPlaneInitialized")["status"] == "Success"
    wait_for(
        "the install",
        lambda: states("AfterControlPlaneInitialized") == {"addons-on-init": "succeeded"},
        timeout=60,
    )
    installed = StepRun.objects.get(run__template_name="addons-on-init")
    assert [e["kind"] for e in installed.output["inventory"]] == [
        "CustomResourceDefinition",
        "Namespace",
        "Deployment",
        "Widget",
    ]
    # The conflict cost one attempt (its retry is in the run's history); the polls after it
    # were progress, which ends a streak of failures.
    retries = RunEvent.objects.filter(run=installed.run_id, name=transitions.RETRY)
    assert retries.count() == 1, "the conflict cost one attempt"
    assert installed.failures == 0
    assert kube.get_object("example.com", "v1", "widgets", "widgets", "main") is not None


def test_a_removal_held_by_a_finalizer_fails_at_its_timeout_naming_the_object_and_finalizer(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator
) -> None:
    """The finalizers page of the Kubernetes documentation: an object whose finalizer nobody
    removes stays. The worker polls the removal until just before the step's timeout, then
    fails it with a message that names the stuck object and its finalizer, which the hook
    answer carries to CAPI."""
    for ns in (NS, "widgets"):
        kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    put_kubeconfig_secret(kube)
    kube.put_object(definition("example.com", "Widget"))
    held = {"name": "main", "namespace": "widgets", "finalizers": ["example.com/cleanup"]}
    kube.put_object({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": held})
    inventory = [
        {"apiVersion": "example.com/v1", "kind": "Widget", "namespace": "widgets", "name": "main"},
    ]
    step = {
        "name": "remove",
        "type": "addon_remove",
        "timeoutSeconds": 8,
        "with": {"inventory": inventory, "pollSeconds": 1},
    }
    wf.template("remove-addons", hook="BeforeClusterDelete", retryAfterSeconds=1, steps=[step])
    assert call_hook(hook_server, "BeforeClusterDelete")["retryAfterSeconds"] == 1
    wait_for(
        "the failure",
        lambda: states("BeforeClusterDelete") == {"remove-addons": "failed"},
        timeout=60,
    )
    answer = call_hook(hook_server, "BeforeClusterDelete")
    assert answer["retryAfterSeconds"] == 1, "onFailure Block keeps holding the deletion"
    reason = (
        "custom resources not gone within the step's timeout: "
        "Widget widgets/main (finalizers: example.com/cleanup)"
    )
    assert f"failed at step remove: {reason}" in answer["message"]
    assert StepRun.objects.get(run__template_name="remove-addons").message == reason
