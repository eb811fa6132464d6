"""`node_job` and `node_wait` against the emulator's Job controller, kubelet and Nodes.

`node_job` is `k8s_job`'s Job (the same code creates and follows it) with the pod bound to the
Node (`spec.nodeName`: kube-scheduler leaves a bound pod alone) and tolerating the cordon's
`node.kubernetes.io/unschedulable` taint, so it runs on a drained Node. `node_wait` waits for
what the kubelet reports of itself: `status.nodeInfo.kubeletVersion` is its build's
`version.Get().String()` (kubernetes 8340f5a9 `pkg/kubelet/nodestatus/setters.go`
`VersionInfo`) and the `Ready` condition (`ReadyCondition`, reason `KubeletReady`).
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.steps.conftest import Context, run
from tests.support import kube_workloads
from tests.support.kube import KubeEmulator
from tests.support.kube_workloads import node
from workflows import clock, errors
from workflows.steps import registry

NODES = ("", "v1", "nodes")
JOBS = ("batch", "v1", "jobs")


def kubelet_reports(kube: KubeEmulator, name: str, version: str, ready: str) -> None:
    status = {
        "nodeInfo": {"kubeletVersion": version},
        "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady"}],
    }
    kube.set_status(*NODES, None, name, status)


def test_node_job_runs_its_pod_on_the_cordoned_node_and_is_done_when_it_succeeds(
    kube: KubeEmulator, context: Context
) -> None:
    work = kube_workloads.start(kube, nodes=[node("worker-1"), node("worker-2")])
    kube.put_object({**node("worker-2"), "spec": {"unschedulable": True}})
    params = {"image": "updater:1", "args": ["--kubelet", "v1.33.0"], "node": "worker-2"}
    ctx = context("node_job", params, hook="UpdateMachine", step_name="update")
    assert isinstance(run(ctx), registry.Poll)
    [job] = kube.list_objects(*JOBS, "default")
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["nodeName"] == "worker-2"
    assert pod_spec["tolerations"] == [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert job["spec"]["podFailurePolicy"]["rules"][0]["action"] == "Ignore"

    def running() -> str:
        for pod in kube.list_objects("", "v1", "pods", "default"):
            if (pod.get("status") or {}).get("phase") == "Running":
                return str(pod["metadata"]["name"])
        return ""

    name = work.wait("the Job's pod to run", running)
    assert work.pod("default", name)["spec"]["nodeName"] == "worker-2"
    work.exit("default", name, "job", 0, "updated\n")
    work.wait("the Job to succeed", lambda: isinstance(run(ctx), registry.Done))


def test_node_job_on_an_unknown_node_fails_before_creating_a_job(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = context("node_job", {"image": "updater:1", "node": "worker-9"}, hook="UpdateMachine")
    with pytest.raises(errors.PermanentError, match=r"^Node worker-9 does not exist"):
        run(ctx)
    assert kube.list_objects(*JOBS, "default") == []


def test_node_job_takes_k8s_jobs_parameters_but_cluster() -> None:
    with pytest.raises(registry.ParamError, match=r"^cluster: unknown parameter$"):
        registry.validate("node_job", {"image": "x", "cluster": "management"}, hook="UpdateMachine")


def test_node_wait_is_done_once_the_kubelet_reports_the_version_and_ready(
    kube: KubeEmulator, context: Context
) -> None:
    kube.put_object(node("worker-1"))
    kubelet_reports(kube, "worker-1", "v1.32.4", "True")
    machine: dict[str, Any] = {
        "name": "m",
        "namespace": "fleet",
        "version": "v1.33.0",
        "status": {"nodeRef": {"name": "worker-1"}},
    }
    ctx = context("node_wait", {"pollSeconds": 5}, hook="UpdateMachine", machine=machine)
    waiting = run(ctx)
    assert waiting == registry.Poll(
        after=5,
        message=(
            "Node worker-1 reports kubelet v1.32.4, Ready True; waiting for kubelet v1.33.0 and"
            " Ready True"
        ),
        output={"node": "worker-1", "kubeletVersion": "v1.32.4", "ready": "True"},
    )
    kubelet_reports(kube, "worker-1", "v1.33.0", "False")  # restarted, not Ready yet
    assert isinstance(run(ctx), registry.Poll)
    kubelet_reports(kube, "worker-1", "v1.33.0+k3s1", "True")
    assert run(ctx) == registry.Done(
        {"node": "worker-1", "kubeletVersion": "v1.33.0+k3s1", "ready": "True"}
    )


def test_node_wait_fails_at_its_timeout_saying_what_the_node_reports(
    kube: KubeEmulator, context: Context
) -> None:
    kube.put_object(node("worker-1"))
    kubelet_reports(kube, "worker-1", "v1.32.4", "Unknown")
    ctx = context("node_wait", {"node": "worker-1", "version": "1.33.0"}, hook="UpdateMachine")
    ctx.deadline = clock.now() + datetime.timedelta(seconds=1)
    with pytest.raises(errors.PermanentError) as raised:
        run(ctx)
    assert str(raised.value) == (
        "Node worker-1 did not report kubelet v1.33.0 and Ready True within the step's timeout"
        " (it reports kubelet v1.32.4, Ready Unknown)"
    )


def test_node_wait_without_a_version_says_what_it_needs(
    kube: KubeEmulator, context: Context
) -> None:
    kube.put_object(node("worker-1"))
    ctx = context("node_wait", {"node": "worker-1"}, step_name="kubelet")
    with pytest.raises(errors.PermanentError, match=r"^step kubelet: no version to wait for"):
        run(ctx)
