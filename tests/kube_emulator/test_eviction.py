"""The emulator's Pod `eviction` subresource and PodDisruptionBudgets, through the official
client (`create_namespaced_pod_eviction`, as kubectl drain and CAPI call it).

kube-apiserver's rules, from kubernetes 01aa0f3f `pkg/registry/core/pod/storage/eviction.go`:
a Pod a budget protects is evicted only while `disruptionsAllowed` > 0, which goes down by
one and records the Pod in `disruptedPods`; at 0 the answer is 429 TooManyRequests with a
`DisruptionBudget` cause; a Pending or ended Pod is deleted whatever its budget; a budget
whose selector is empty protects nothing; two budgets over one Pod are a 500.
"""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest

from tests.kube_emulator.conftest import Api
from tests.support.kube import KubeEmulator

PODS = ("", "v1", "pods")
PDBS = ("policy", "v1", "poddisruptionbudgets")


def running_pod(name: str, labels: dict[str, str], *, phase: str = "Running") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "nodeName": "worker-1",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "web:1"}],
        },
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def budget(kube: KubeEmulator, name: str, selector: dict[str, Any], allowed: int) -> None:
    kube.put_object(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default", "generation": 1},
            "spec": {"selector": selector, "minAvailable": 2},
        }
    )
    status = {
        "observedGeneration": 1,
        "disruptionsAllowed": allowed,
        "currentHealthy": 2 + allowed,
        "desiredHealthy": 2,
        "expectedPods": 2 + allowed,
    }
    kube.set_status(*PDBS, "default", name, status)


def evict(core: Api, name: str) -> Any:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    return core.create_namespaced_pod_eviction(name, "default", body)


def test_an_eviction_the_budget_allows_deletes_the_pod_and_spends_the_budget(
    kube: KubeEmulator, core: Api
) -> None:
    """checkAndDecrement: disruptionsAllowed 1 -> 0, the Pod in disruptedPods; then the
    Pod is deleted (no grace: not bound to a running kubelet's grace here, 0 s)."""
    kube.put_object({**running_pod("web-1", {"app": "web"})})
    budget(kube, "web", {"matchLabels": {"app": "web"}}, allowed=1)
    evict(core, "web-1")
    pdb = kube.get_object(*PDBS, "default", "web")
    assert pdb is not None
    assert pdb["status"]["disruptionsAllowed"] == 0
    assert list(pdb["status"]["disruptedPods"]) == ["web-1"]
    found = kube.get_object(*PODS, "default", "web-1")
    assert found is None or found["metadata"].get("deletionTimestamp")


def test_an_eviction_the_budget_forbids_is_a_429_naming_the_budget(
    kube: KubeEmulator, core: Api
) -> None:
    """disruptionsAllowed 0: NewTooManyRequests with a DisruptionBudget cause; the Pod stays."""
    kube.put_object(running_pod("web-1", {"app": "web"}))
    budget(
        kube, "web", {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}, 0
    )
    with pytest.raises(kubernetes.client.ApiException) as raised:
        evict(core, "web-1")
    assert raised.value.status == 429
    status = json.loads(str(raised.value.body))
    assert status["reason"] == "TooManyRequests"
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    [cause] = status["details"]["causes"]
    assert cause == {
        "reason": "DisruptionBudget",
        "message": "The disruption budget web needs 2 healthy pods and has 2 currently",
    }
    assert kube.get_object(*PODS, "default", "web-1") is not None


def test_a_pending_or_ended_pod_is_deleted_whatever_its_budget(
    kube: KubeEmulator, core: Api
) -> None:
    """canIgnorePDB: Pending, Succeeded and Failed Pods have disrupted nothing: deleted."""
    budget(kube, "web", {"matchLabels": {"app": "web"}}, allowed=0)
    for name, phase in (("p", "Pending"), ("s", "Succeeded"), ("f", "Failed")):
        kube.put_object(running_pod(name, {"app": "web"}, phase=phase))
        evict(core, name)
        found = kube.get_object(*PODS, "default", name)
        # A bound Pending Pod gets its grace period (its kubelet may run it); ended ones none.
        assert found is None or (phase == "Pending" and found["metadata"]["deletionTimestamp"])


def test_an_empty_selector_protects_nothing_and_two_budgets_are_a_500(
    kube: KubeEmulator, core: Api
) -> None:
    """getPodDisruptionBudgets: an empty selector matches no Pod; more than one budget over
    a Pod is a 500 Status the eviction subresource does not support."""
    kube.put_object(running_pod("a", {"app": "web"}))
    budget(kube, "everything", {}, allowed=0)
    evict(core, "a")
    assert kube.get_object(*PODS, "default", "a") is None

    kube.put_object(running_pod("b", {"app": "web"}))
    budget(kube, "one", {"matchLabels": {"app": "web"}}, allowed=1)
    budget(kube, "two", {"matchLabels": {"app": "web"}}, allowed=1)
    with pytest.raises(kubernetes.client.ApiException) as raised:
        evict(core, "b")
    assert raised.value.status == 500
    assert "more than one PodDisruptionBudget" in str(raised.value.body)


def test_evicting_a_pod_that_does_not_exist_is_a_404(kube: KubeEmulator, core: Api) -> None:
    with pytest.raises(kubernetes.client.ApiException) as raised:
        evict(core, "ghost")
    assert raised.value.status == 404


def test_an_eviction_in_a_terminating_namespace_is_forbidden(kube: KubeEmulator, core: Api) -> None:
    """kubernetes 04791b49 staging/src/k8s.io/apiserver/pkg/admission/plugin/namespace/
    lifecycle/admission.go `Admit`: every create in a terminating namespace, a subresource
    such as an eviction too, is 403 with cause NamespaceTerminating; the Pod stays."""
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "old"}})
    kube.put_object({**running_pod("web-1", {}), "metadata": {"name": "web-1", "namespace": "old"}})
    kube.set_status("", "v1", "namespaces", None, "old", {"phase": "Terminating"})
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1"}}
    with pytest.raises(kubernetes.client.ApiException) as raised:
        core.create_namespaced_pod_eviction("web-1", "old", body)
    assert raised.value.status == 403
    status = json.loads(str(raised.value.body))
    assert status["message"] == (
        'pods "web-1" is forbidden: unable to create new content in namespace old because it'
        " is being terminated"
    )
    assert [c["reason"] for c in status["details"]["causes"]] == ["NamespaceTerminating"]
    assert kube.get_object(*PODS, "old", "web-1") is not None
