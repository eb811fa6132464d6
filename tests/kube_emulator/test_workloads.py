"""The emulator's workload controllers, driven through the official client over its socket.

kube-scheduler's taints and tolerations and its `Unschedulable` condition; the kubelet's
image pulls (`ErrImagePull`, `ImagePullBackOff`), container ends and restarts
(`CrashLoopBackOff`), Pod phases and an eviction's `DisruptionTarget`; the Job controller's
Pods, counts, backoff, `podFailurePolicy` and conditions; the TTL-after-finished controller.
Each test names the upstream source it follows; `tests/support/kube_workloads.py` and
`kube_jobs.py` say what is modelled and what is not.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.kube_emulator.conftest import Api
from tests.support import kube_jobs, kube_workloads
from tests.support.kube import KubeEmulator
from tests.support.kube_store import Change, Store
from tests.support.kube_workloads import Script, Workloads, node

CONTROL_PLANE = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
JOBS = ("batch", "v1", "jobs")


class _Recorder:
    """Keeps the waiting reason of each committed change of one Pod's container, in order."""

    def __init__(self, pod: str, container: str) -> None:
        self.pod, self.container, self.reasons = pod, container, list[str]()

    def react(self, store: Store, change: Change) -> None:
        if change.plural != "pods" or change.new["metadata"]["name"] != self.pod:
            return
        for status in (change.new.get("status") or {}).get("containerStatuses") or []:
            state = status.get("state") or {}
            reason = (state.get("waiting") or {}).get("reason") or next(iter(state), "")
            if status["name"] == self.container and (
                not self.reasons or self.reasons[-1] != reason
            ):
                self.reasons.append(reason)


def pod(name: str, *images: str, restart: str = "Never", **spec: Any) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]
    return {
        "metadata": {"name": name},
        "spec": {"containers": containers, "restartPolicy": restart, **spec},
    }


def phase(work: Workloads, name: str) -> str:
    return str((work.pod("default", name).get("status") or {}).get("phase", ""))


def test_a_pod_is_bound_to_a_node_whose_taints_it_tolerates_and_runs(
    kube: KubeEmulator, core: Api
) -> None:
    """kube-scheduler skips Nodes with an untolerated NoSchedule taint (taint-and-toleration
    page); the kubelet then reports the Pod Running with its containers running and ready
    (pod-lifecycle page)."""
    work = kube_workloads.start(
        kube,
        nodes=[
            node("cp-1", [CONTROL_PLANE]),
            node("worker-1", [{"key": "gpu", "effect": "PreferNoSchedule"}]),
        ],
    )
    core.create_namespaced_pod("default", pod("web", "nginx:1.27"))
    work.wait("Running", lambda: phase(work, "web") == "Running")
    found = core.read_namespaced_pod("web", "default")
    assert found.spec.node_name == "worker-1"
    [status] = found.status.container_statuses
    assert (status.ready, status.started, status.restart_count) == (True, True, 0)
    assert status.state.running.started_at is not None
    conditions = {c.type: c.status for c in found.status.conditions}
    assert conditions["PodScheduled"] == "True"
    assert conditions["Ready"] == "True"


def test_a_pod_no_node_fits_is_unschedulable_until_one_does(kube: KubeEmulator, core: Api) -> None:
    """kube-scheduler sets PodScheduled False with reason Unschedulable and a message counting
    the Nodes per cause, and tries the Pod again when Nodes change."""
    work = kube_workloads.start(kube, nodes=[node("cp-1", [CONTROL_PLANE])])
    core.create_namespaced_pod("default", pod("web", "nginx:1.27"))

    def unschedulable() -> Any:
        conditions = (work.pod("default", "web").get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "PodScheduled"), None)

    condition = work.wait("the Unschedulable condition", unschedulable)
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert condition["message"].startswith(
        "0/1 nodes are available: 1 node(s) had untolerated taint"
        " {node-role.kubernetes.io/control-plane: }."
    )
    assert phase(work, "web") == "Pending"
    kube.put_object(node("worker-1"))
    work.wait("Running", lambda: phase(work, "web") == "Running")
    assert core.read_namespaced_pod("web", "default").spec.node_name == "worker-1"


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"operator": "Exists"}, CONTROL_PLANE, True),
        (
            {"key": "gpu", "operator": "Exists"},
            {"key": "gpu", "value": "a100", "effect": "NoExecute"},
            True,
        ),
        (
            {"key": "gpu", "operator": "Equal", "value": "a100"},
            {"key": "gpu", "value": "h100", "effect": "NoSchedule"},
            False,
        ),
        (
            {"key": "gpu", "value": "a100", "effect": "NoSchedule"},
            {"key": "gpu", "value": "a100", "effect": "NoSchedule"},
            True,
        ),
        (
            {"key": "gpu", "operator": "Exists", "effect": "NoExecute"},
            {"key": "gpu", "effect": "NoSchedule"},
            False,
        ),
        ({"key": "other", "operator": "Exists"}, CONTROL_PLANE, False),
        ({"operator": "Equal"}, CONTROL_PLANE, False),
    ],
)
def test_tolerations_match_taints_as_documented(
    toleration: dict[str, str], taint: dict[str, str], expected: bool
) -> None:
    """https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/: keys and
    effects must match (an empty effect matches all); Exists ignores the value, Equal (the
    default) compares it; an empty key with Exists matches every taint."""
    assert kube_workloads.tolerates(toleration, taint) is expected


def test_an_unpullable_image_alternates_err_image_pull_and_back_off_until_it_can_be_pulled(
    kube: KubeEmulator, core: Api
) -> None:
    """kubernetes pkg/kubelet/images/image_manager.go: a failed pull is ErrImagePull with the
    runtime's error; within the backoff the sync reports ImagePullBackOff, `Back-off pulling
    image "..."`; after it the kubelet pulls again. The Pod stays Pending (pod-lifecycle)."""
    work = kube_workloads.start(kube)
    recorder = _Recorder("web", "c0")
    kube.add_controller(recorder)
    work.unpullable("registry.example.com/web:9.9")
    core.create_namespaced_pod("default", pod("web", "registry.example.com/web:9.9"))
    work.wait("a second pull", lambda: recorder.reasons.count("ErrImagePull") >= 2)
    assert recorder.reasons[:4] == [
        "ContainerCreating",
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImagePull",
    ]
    work.wait(
        "the back-off", lambda: work.waiting_reason("default", "web", "c0") == "ImagePullBackOff"
    )
    [status] = core.read_namespaced_pod("web", "default").status.container_statuses
    assert status.state.waiting.message == 'Back-off pulling image "registry.example.com/web:9.9"'
    assert phase(work, "web") == "Pending"
    work.unpullable("registry.example.com/web:9.9", refused=False)
    work.wait("Running", lambda: phase(work, "web") == "Running")


def test_ended_containers_set_the_phase_and_their_logs(kube: KubeEmulator, core: Api) -> None:
    """Pod phase (pod-lifecycle page): Running while a container runs; with restartPolicy
    Never, Succeeded when all ended with 0, Failed when one did not. The log is per container."""
    work = kube_workloads.start(kube)
    core.create_namespaced_pod("default", pod("two", "runner:1", "sidecar:1"))
    work.wait("Running", lambda: phase(work, "two") == "Running")
    work.exit("default", "two", "c0", 2, log="panic: boom\n")
    work.wait(
        "the runner's end",
        lambda: (
            "terminated" in work.pod("default", "two")["status"]["containerStatuses"][0]["state"]
        ),
    )
    assert phase(work, "two") == "Running", "the sidecar still runs"
    work.exit("default", "two", "c1", 0)
    work.wait("Failed", lambda: phase(work, "two") == "Failed")
    runner = work.pod("default", "two")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (runner["exitCode"], runner["reason"]) == (2, "Error")
    assert core.read_namespaced_pod_log("two", "default", container="c0") == "panic: boom\n"
    core.create_namespaced_pod("default", pod("one", "tool:1"))
    work.wait("Running", lambda: phase(work, "one") == "Running")
    work.exit("default", "one", "c0", 0, log="done\n")
    work.wait("Succeeded", lambda: phase(work, "one") == "Succeeded")


def test_a_crashing_container_that_is_restarted_waits_in_crash_loop_back_off(
    kube: KubeEmulator, core: Api
) -> None:
    """The kubelet restarts a container of an Always (or, on failure, OnFailure) Pod after a
    backoff, reporting CrashLoopBackOff with the ended run in lastState; restartCount counts
    the restarts; the Pod stays Running. A Never Pod's container is not restarted."""
    work = kube_workloads.start(kube)
    work.script("crasher:1", Script(exit_code=1, log="oops\n"))
    core.create_namespaced_pod("default", pod("loop", "crasher:1", restart="Always"))
    work.wait(
        "CrashLoopBackOff",
        lambda: work.waiting_reason("default", "loop", "c0") == "CrashLoopBackOff",
    )
    [status] = core.read_namespaced_pod("loop", "default").status.container_statuses
    assert status.last_state.terminated.exit_code == 1
    assert status.state.waiting.message.startswith(
        "back-off 10s restarting failed container=c0 pod=loop_default("
    )
    assert phase(work, "loop") == "Running"
    work.wait(
        "a restart",
        lambda: work.pod("default", "loop")["status"]["containerStatuses"][0]["restartCount"] >= 1,
    )
    core.create_namespaced_pod("default", pod("once", "crasher:1"))
    work.wait("Failed", lambda: phase(work, "once") == "Failed")
    [status] = core.read_namespaced_pod("once", "default").status.container_statuses
    assert status.restart_count == 0 and status.state.terminated.exit_code == 1


def test_an_eviction_marks_the_pod_a_disruption_target_and_fails_it(
    kube: KubeEmulator, core: Api
) -> None:
    """Pod disruption conditions (disruptions page): an evicted Pod gets DisruptionTarget
    (reason EvictionByEvictionAPI); its containers are killed and a Never Pod ends Failed."""
    work = kube_workloads.start(kube)
    core.create_namespaced_pod("default", pod("web", "nginx:1.27"))
    work.wait("Running", lambda: phase(work, "web") == "Running")
    work.disrupt("default", "web")
    work.wait("Failed", lambda: phase(work, "web") == "Failed")
    found = core.read_namespaced_pod("web", "default")
    [target] = [c for c in found.status.conditions if c.type == "DisruptionTarget"]
    assert (target.status, target.reason) == ("True", "EvictionByEvictionAPI")
    assert found.status.container_statuses[0].state.terminated.exit_code == 137


def job(name: str, image: str, **spec: Any) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "job", "image": image}]},
    }
    return {"metadata": {"name": name}, "spec": {"template": template, **spec}}


def job_status(kube: KubeEmulator, name: str) -> dict[str, Any]:
    found = kube.get_object(*JOBS, "default", name)
    return (found or {}).get("status") or {}


def kinds(kube: KubeEmulator, name: str) -> list[str]:
    return [c["type"] for c in job_status(kube, name).get("conditions") or []]


def job_pods(core: Api, name: str) -> list[Any]:
    return list(core.list_namespaced_pod("default", label_selector=f"job-name={name}").items)


def test_a_job_runs_its_pod_and_completes(kube: KubeEmulator, core: Api, batch: Api) -> None:
    """The Jobs page: the controller makes the Pod from the template, labelled with the
    Job's name and uid and owned by the Job; a success gives SuccessCriteriaMet, then
    Complete (v1.31+: once the Pods ended) with succeeded 1 and a completionTime."""
    work = kube_workloads.start(kube)
    work.script("tool:1", Script(exit_code=0, log="migrated\n"))
    created = batch.create_namespaced_job("default", job("migrate", "tool:1", backoffLimit=0))
    work.wait("Complete", lambda: "Complete" in kinds(kube, "migrate"))
    [found] = job_pods(core, "migrate")
    assert found.metadata.name.startswith("migrate-")
    assert found.metadata.labels == {
        "app": "migrate",
        "batch.kubernetes.io/controller-uid": created.metadata.uid,
        "batch.kubernetes.io/job-name": "migrate",
        "controller-uid": created.metadata.uid,
        "job-name": "migrate",
    }
    [owner] = found.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "Job",
        "migrate",
        created.metadata.uid,
        True,
    )
    status = job_status(kube, "migrate")
    assert kinds(kube, "migrate") == ["SuccessCriteriaMet", "Complete"]
    assert (status["succeeded"], status["failed"], status["active"]) == (1, 0, 0)
    assert status["completionTime"] and status["startTime"]
    assert core.read_namespaced_pod_log(found.metadata.name, "default") == "migrated\n"


def test_failed_pods_are_replaced_until_the_backoff_limit_fails_the_job(
    kube: KubeEmulator, core: Api, batch: Api
) -> None:
    """Pod backoff failure policy (Jobs page): each failed Pod counts; a new Pod follows
    until failed exceeds backoffLimit; then FailureTarget and Failed, reason
    BackoffLimitExceeded."""
    work = kube_workloads.start(kube)
    work.script("tool:1", Script(exit_code=3))
    batch.create_namespaced_job("default", job("migrate", "tool:1", backoffLimit=1))
    work.wait("Failed", lambda: "Failed" in kinds(kube, "migrate"))
    assert len(job_pods(core, "migrate")) == 2
    status = job_status(kube, "migrate")
    assert (status["failed"], status["succeeded"], status["active"]) == (2, 0, 0)
    assert kinds(kube, "migrate") == ["FailureTarget", "Failed"]
    [failed] = [c for c in status["conditions"] if c["type"] == "Failed"]
    assert (failed["reason"], failed["message"]) == (
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )


IGNORE_DISRUPTIONS = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
}


@pytest.mark.parametrize(
    ("policy", "outcome"), [(IGNORE_DISRUPTIONS, "Complete"), (None, "Failed")]
)
def test_a_pod_failure_policy_rule_ignores_a_disrupted_pod(
    kube: KubeEmulator, core: Api, batch: Api, policy: Any, outcome: str
) -> None:
    """Pod failure policy (Jobs page): `Ignore` on a DisruptionTarget condition does not count
    the failed Pod towards backoffLimit and replaces it; without the rule it counts."""
    work = kube_workloads.start(kube)
    spec = {"backoffLimit": 0, **({"podFailurePolicy": policy} if policy else {})}
    batch.create_namespaced_job("default", job("migrate", "tool:1", **spec))
    first = work.wait("the Pod", lambda: job_pods(core, "migrate"))[0].metadata.name
    work.wait("Running", lambda: phase(work, first) == "Running")
    work.disrupt("default", first)
    if outcome == "Failed":
        work.wait("Failed", lambda: "Failed" in kinds(kube, "migrate"))
        assert job_status(kube, "migrate")["failed"] == 1
        return
    second = work.wait(
        "a new Pod", lambda: [p for p in job_pods(core, "migrate") if p.metadata.name != first]
    )
    name = second[0].metadata.name
    work.wait("Running", lambda: phase(work, name) == "Running")
    work.exit("default", name, "job", 0)
    work.wait("Complete", lambda: "Complete" in kinds(kube, "migrate"))
    assert (job_status(kube, "migrate")["failed"], job_status(kube, "migrate")["succeeded"]) == (
        0,
        1,
    )


def test_a_fail_job_rule_on_an_exit_code_fails_the_job_at_once(
    kube: KubeEmulator, core: Api, batch: Api
) -> None:
    """Pod failure policy (Jobs page): `FailJob` on `onExitCodes` In [42] fails the Job
    whatever backoffLimit allows."""
    work = kube_workloads.start(kube)
    work.script("tool:1", Script(exit_code=42))
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    batch.create_namespaced_job(
        "default", job("migrate", "tool:1", backoffLimit=5, podFailurePolicy=policy)
    )
    work.wait("Failed", lambda: "Failed" in kinds(kube, "migrate"))
    assert len(job_pods(core, "migrate")) == 1
    [failed] = [c for c in job_status(kube, "migrate")["conditions"] if c["type"] == "Failed"]
    assert failed["reason"] == "PodFailurePolicy"


def test_a_finished_job_is_deleted_once_its_ttl_has_passed(kube: KubeEmulator, batch: Api) -> None:
    """TTL-after-finished controller (ttlafterfinished page): the timer starts when the Job
    gets Complete or Failed; after ttlSecondsAfterFinished the Job is deleted."""
    work = kube_workloads.start(kube, time_scale=0.01)
    work.script("tool:1", Script(exit_code=0))
    batch.create_namespaced_job("default", job("kept", "tool:1", ttlSecondsAfterFinished=100))
    batch.create_namespaced_job("default", job("brief", "tool:1", ttlSecondsAfterFinished=0))
    batch.create_namespaced_job("default", job("forever", "tool:1"))
    work.wait(
        "the brief Job's deletion", lambda: kube.get_object(*JOBS, "default", "brief") is None
    )
    assert "Complete" in kinds(kube, "kept"), "finished, but its TTL (1 s here) runs"
    work.wait("the kept Job's deletion", lambda: kube.get_object(*JOBS, "default", "kept") is None)
    assert kube_jobs.finished(kube.get_object(*JOBS, "default", "forever") or {})
