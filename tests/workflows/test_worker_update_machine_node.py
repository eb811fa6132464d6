"""An in-place update of a Machine's Node through the real worker: drain, Job, kubelet, uncordon.

CAPI's Machine controller (modelled by tests/support/capi_inplace.py's MachineController)
calls UpdateMachine until it answers done; the worker (its management cluster the emulator,
the workload cluster the same emulator through the `<cluster>-kubeconfig` Secret) runs the
UpdateMachine template's node steps against it:

- `node_drain` cordons the Machine's Node (read from the Machine's `status.nodeRef`: the
  request carries no status) and evicts its Pods through the Eviction API; the API server
  refuses the eviction of a Pod whose PodDisruptionBudget allows no disruption with 429
  (kubernetes 01aa0f3f pkg/registry/core/pod/storage/eviction.go `checkAndDecrement`,
  tests/support/kube_eviction.py), which the step waits out as CAPI's drain does
  (cluster-api 03c3f0c2 internal/controllers/machine/drain/drain.go `EvictPods`); a running
  DaemonSet Pod stays (kubectl pkg/drain/filters.go `daemonSetFilter`);
- `node_job` runs the update as a Job whose Pod is bound to that Node;
- `node_wait` waits for the Node's kubelet to report the Machine's desired version and
  Ready (kubernetes 8340f5a9 pkg/kubelet/nodestatus/setters.go `VersionInfo`,
  `ReadyCondition`): the emulator's kubelet reports it once the Job's container installed it;
- `node_uncordon` makes the Node schedulable again.

A user checks: the Machine held while the Node is cordoned and drained, its Pods evicted
(the budget's one once the budget allows it), the Job's Pod on that Node, and the Machine
released only once the Node reports the new kubelet and is schedulable again; and a Node
that never reports it fails the update (Failure, the same words at every call) until an
operator fixes the Node and retries the run.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from tests.steps.conftest import NS, put_kubeconfig_secret
from tests.support import capi, kube_workloads
from tests.support import capi_inplace as capi_model
from tests.support import capi_machines as cm
from tests.support.kube import KubeEmulator
from tests.support.kube_kubelet import Script
from tests.support.kube_workloads import node
from tests.support.worker import Worker, wait_for
from workflows.definitions import apply, spec
from workflows.models import Run, StepRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PODS = ("", "v1", "pods")
NODES = ("", "v1", "nodes")
PDBS = ("policy", "v1", "poddisruptionbudgets")
JOBS = ("batch", "v1", "jobs")
MACHINE = "md-0-abcde"


@pytest.fixture(autouse=True)
def _inplace_hooks() -> Any:
    with override_settings(OPTIONAL_HOOKS="InPlaceUpdates", HOOK_CALL_FLUSH_SECONDS=0):
        yield


def _owner(kube: KubeEmulator, kind: str, name: str) -> dict[str, Any]:
    plural = {"DaemonSet": "daemonsets", "StatefulSet": "statefulsets"}[kind]
    made = kube.put_object(
        {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": "shop"}}
    )
    assert kube.get_object("apps", "v1", plural, "shop", name) is not None
    return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": made["metadata"]["uid"],
            "controller": True}  # fmt: skip


def _pod(name: str, owner: dict[str, Any], app: str, on: str = "worker-1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": {"app": app},
            "ownerReferences": [owner],
        },
        "spec": {
            "nodeName": on,
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "c", "image": f"{app}:1"}],
        },
    }


def _cluster(kube: KubeEmulator) -> kube_workloads.Workloads:
    """Two Nodes at kubelet v1.32.4, the Machine on worker-1 (its status.nodeRef), and on
    worker-1 a web Pod under a budget that allows no disruption, a cache Pod and a DaemonSet
    Pod, all running."""
    for ns in (NS, "shop"):
        kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    put_kubeconfig_secret(kube)
    kube.declare("cluster.x-k8s.io", "v1beta2", "machines", "Machine", namespaced=True)
    machine = cm.machine(MACHINE, NS, version="v1.32.4", labels={"inplace": "true"})
    kube.put_object({**machine, "status": {"nodeRef": {"name": "worker-1"}}})
    work = kube_workloads.start(kube, nodes=[node("worker-1"), node("worker-2")])
    for name in ("worker-1", "worker-2"):
        status = {
            "nodeInfo": {"kubeletVersion": "v1.32.4"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        }
        kube.set_status(*NODES, None, name, status)
    kube.put_object(_pod("web-0", _owner(kube, "StatefulSet", "web"), "web"))
    kube.put_object(_pod("web-1", _owner(kube, "StatefulSet", "web-b"), "web", on="worker-2"))
    kube.put_object(_pod("cache-0", _owner(kube, "StatefulSet", "cache"), "cache"))
    kube.put_object(_pod("logs-w1", _owner(kube, "DaemonSet", "logs"), "logs"))
    kube.put_object(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "shop", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "minAvailable": 2},
        }
    )
    # The disruption controller's view: two healthy web Pods, two wanted, none to spare.
    blocked = {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 2,
               "desiredHealthy": 2, "expectedPods": 2}  # fmt: skip
    kube.set_status(*PDBS, "shop", "web", blocked)
    # Only a running, Ready Pod is subject to its budget (a Pending one is evicted at once).
    wait_for(
        lambda: all(_phase(kube, p) == "Running" for p in ("web-0", "cache-0", "logs-w1")),
        what="the Pods to run",
    )
    work.script("updater:1", Script(seconds=1, log="kubelet v1.33.0\n", kubelet_version="v1.33.0"))
    return work


def _phase(kube: KubeEmulator, name: str) -> str:
    found = kube.get_object(*PODS, "shop", name)
    return str(((found or {}).get("status") or {}).get("phase") or "")


def _on(kube: KubeEmulator, node_name: str) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in kube.list_objects(*PODS, "shop")
        if p["spec"].get("nodeName") == node_name and not p["metadata"].get("deletionTimestamp")
    )


def _node(kube: KubeEmulator, name: str = "worker-1") -> dict[str, Any]:
    found = kube.get_object(*NODES, None, name)
    assert found is not None
    return found


def _cordoned(kube: KubeEmulator) -> bool:
    return bool(_node(kube)["spec"].get("unschedulable"))


def _template(steps: list[dict[str, Any]] | None = None) -> None:
    document = {
        "apiVersion": "hooksvc/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": "update-node"},
        "spec": {
            "hook": "UpdateMachine",
            "clusterSelector": {"matchLabels": {"inplace": "true"}},
            "retryAfterSeconds": 1,
            "steps": steps
            or [
                {"name": "drain", "type": "node_drain", "with": {"pollSeconds": 1}},
                {
                    "name": "update",
                    "type": "node_job",
                    "dependsOn": ["drain"],
                    "with": {
                        "image": "updater:1",
                        "args": ["--kubelet", "v1.33.0"],
                        "pollSeconds": 1,
                    },
                },
                {
                    "name": "kubelet",
                    "type": "node_wait",
                    "dependsOn": ["update"],
                    "with": {"pollSeconds": 1},
                },
                {"name": "uncordon", "type": "node_uncordon", "dependsOn": ["kubelet"]},
            ],
        },
    }
    apply.templates_apply(documents=spec.parse(json.dumps(document)))


def _poster(client: Client) -> Any:
    def post(body: dict[str, Any]) -> dict[str, Any]:
        response = client.post(
            capi.hook_path("UpdateMachine"), json.dumps(body), content_type="application/json"
        )
        answer: dict[str, Any] = response.json()
        return answer

    return post


DESIRED = cm.objects(machine={"name": MACHINE, "version": "v1.33.0", "labels": {"inplace": "true"}})


def test_a_machines_node_is_drained_updated_and_uncordoned_while_the_machine_is_held(
    client: Client, worker: Worker, kube: KubeEmulator
) -> None:
    _cluster(kube)
    _template()
    post = _poster(client)
    machine = capi_model.MachineController(post, DESIRED)
    # What the Node looked like at each answer: (retryAfterSeconds, cordoned).
    seen: list[tuple[int, bool]] = []

    def reconcile() -> None:
        machine.reconcile()
        seen.append((machine.answers[-1]["retryAfterSeconds"], _cordoned(kube)))

    reconcile()
    assert seen[0][0] > 0, "held from the first call"
    run = Run.objects.get(hook="UpdateMachine")

    def drain_refused() -> bool:
        reconcile()
        step = StepRun.objects.filter(run=run, name="drain").first()
        return step is not None and "refused eviction (shop/web-0)" in step.message

    wait_for(drain_refused, what="the budget to refuse web-0's eviction")
    assert _cordoned(kube) and not bool(_node(kube, "worker-2")["spec"].get("unschedulable"))
    wait_for(lambda: _on(kube, "worker-1") == ["logs-w1", "web-0"], what="cache-0's eviction")
    assert _on(kube, "worker-2") == ["web-1"], "Pods of other Nodes stay"
    reconcile()
    assert machine.answers[-1]["retryAfterSeconds"] > 0 and not machine.done, "held while drained"
    assert machine.answers[-1]["message"] == "workflow update-node is running step drain"

    # web-1 is healthy elsewhere and the budget gets a third Pod: one disruption allowed.
    kube.set_status(*PDBS, "shop", "web", {"disruptionsAllowed": 1, "currentHealthy": 3})

    def done() -> bool:
        reconcile()
        return machine.done

    wait_for(done, timeout=90, what="the update to end")
    run.refresh_from_db()
    assert run.state == "succeeded", run.message
    assert [s.state for s in run.steps.order_by("id")] == ["succeeded"] * 4
    assert _on(kube, "worker-1") == ["logs-w1"], "all but the DaemonSet Pod evicted"
    [job] = kube.list_objects(*JOBS, "default")
    assert job["spec"]["template"]["spec"]["nodeName"] == "worker-1", "the Job ran on the Node"
    assert _node(kube)["status"]["nodeInfo"]["kubeletVersion"] == "v1.33.0"
    assert not _cordoned(kube), "schedulable again"
    assert all(a["status"] == "Success" for a in machine.answers)
    assert all(wait > 0 for wait, cordoned in seen if cordoned), "held while cordoned"
    assert seen[-1] == (0, False), "released once uncordoned"
    assert any(cordoned for _, cordoned in seen)


def test_a_node_that_never_reports_the_version_fails_the_update_until_retried_once_fixed(
    client: Client, worker: Worker, kube: KubeEmulator
) -> None:
    """node_wait fails at its timeout naming what the Node reports; CAPI gets the same
    Failure at every call (it requeues with backoff and calls again); once the Node runs
    the new kubelet, an operator's retry (`workflows retry`) lets the update finish."""
    _cluster(kube)
    wait = {"pollSeconds": 1}
    _template([{"name": "kubelet", "type": "node_wait", "timeoutSeconds": 3, "with": wait}])
    post = _poster(client)
    machine = capi_model.MachineController(post, DESIRED)

    def failed() -> bool:
        machine.reconcile()
        return bool(machine.answers[-1]["status"] == "Failure")

    wait_for(failed, what="the update to fail")
    failure = machine.answers[-1]
    assert "Node worker-1 did not report kubelet v1.33.0 and Ready True" in failure["message"]
    for _ in range(3):
        machine.reconcile()
    assert machine.answers[-3:] == [failure] * 3, "the same Failure, until someone acts"
    assert not machine.done

    kubelet = {"nodeInfo": {"kubeletVersion": "v1.33.0"}}
    kube.set_status(*NODES, None, "worker-1", kubelet)  # the Node fixed by hand
    run = Run.objects.get(hook="UpdateMachine")
    out = io.StringIO()
    call_command("workflows", "retry", str(run.pk), "--reason", "kubelet fixed", stdout=out)

    def done() -> bool:
        machine.reconcile()
        return machine.done

    wait_for(done, what="the retried update to end")
    last = machine.answers[-1]
    assert (last["status"], last["retryAfterSeconds"]) == ("Success", 0)
    run.refresh_from_db()
    assert run.state == "succeeded"
