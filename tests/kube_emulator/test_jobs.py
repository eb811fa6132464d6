"""The emulator's Job controller as kube-controller-manager's acts, through the official client.

Each test cites the upstream source it follows (kubernetes v1.33 unless said otherwise):
Pods that cannot be created (`FailedCreate` Events, no condition, retried until they can),
the interim conditions before the terminal ones (`FailureTarget`, `SuccessCriteriaMet`),
`activeDeadlineSeconds`, the status fields (`ready`, `terminating`,
`uncountedTerminatedPods`), the tracking finalizer, and the `FailJob` message.
`tests/support/kube_jobs.py` says what is modelled and what is not.
"""

from __future__ import annotations

from typing import Any

from tests.kube_emulator.conftest import Api
from tests.support import kube_workloads
from tests.support.kube import KubeEmulator
from tests.support.kube_store import Change, Store
from tests.support.kube_workloads import Script

JOBS = ("batch", "v1", "jobs")
TRACKING = "batch.kubernetes.io/job-tracking"


class _Statuses:
    """Keeps each committed status of one Job, in order: what a watcher of it sees."""

    def __init__(self, name: str) -> None:
        self.name, self.seen = name, list[dict[str, Any]]()

    def react(self, store: Store, change: Change) -> None:
        if (change.group, change.plural) == ("batch", "jobs") and change.new["metadata"][
            "name"
        ] == self.name:
            self.seen.append(dict(change.new.get("status") or {}))

    def kinds(self) -> list[list[str]]:
        """The condition types of each status, without repeats."""
        out: list[list[str]] = []
        for status in self.seen:
            kinds = [c["type"] for c in status.get("conditions") or []]
            if not out or out[-1] != kinds:
                out.append(kinds)
        return out


def job(name: str, image: str, **spec: Any) -> dict[str, Any]:
    pod_spec = {"restartPolicy": "Never", "containers": [{"name": "job", "image": image}]}
    pod_spec.update(spec.pop("pod", {}))
    template = {"metadata": {"labels": {"app": name}}, "spec": pod_spec}
    return {"metadata": {"name": name}, "spec": {"template": template, **spec}}


def status(kube: KubeEmulator, name: str) -> dict[str, Any]:
    found = kube.get_object(*JOBS, "default", name)
    return (found or {}).get("status") or {}


def kinds(kube: KubeEmulator, name: str) -> list[str]:
    return [c["type"] for c in status(kube, name).get("conditions") or []]


def job_pods(core: Api, name: str) -> list[Any]:
    return list(core.list_namespaced_pod("default", label_selector=f"job-name={name}").items)


def test_a_pod_that_cannot_be_created_gives_failed_create_events_and_no_condition(
    kube: KubeEmulator, core: Api, batch: Api
) -> None:
    """kubernetes pkg/controller/job/job_controller.go `manageJob` creates through
    pkg/controller/controller_utils.go `RealPodControl.CreatePods`, which records a Warning
    `FailedCreate` Event, "Error creating: <error>", on the Job; the sync then fails and is
    tried again with the queue's backoff (DefaultJobApiBackOff 1 s to MaxJobApiBackOff 60 s),
    so the Event's count grows (client-go tools/record events_cache.go) and the Job gets no
    condition. The refusal is the ServiceAccount admission plugin's
    (plugin/pkg/admission/serviceaccount/admission.go `Admit`: error looking up service
    account), naming the Pod by its generateName (apiserver pkg/admission/errors.go). Once
    the ServiceAccount exists the next try creates the Pod (`SuccessfulCreate`)."""
    work = kube_workloads.start(kube, time_scale=0.001)
    work.script("tool:1", Script(exit_code=0, log="done\n"))
    created = batch.create_namespaced_job(
        "default", job("migrate", "tool:1", backoffLimit=0, pod={"serviceAccountName": "migrator"})
    )
    uid = created.metadata.uid
    refused = work.wait(
        "a repeated FailedCreate",
        lambda: [e for e in work.events("default", uid, "FailedCreate") if e["count"] >= 3],
    )
    [event] = refused
    assert (event["type"], event["source"]["component"]) == ("Warning", "job-controller")
    assert event["message"] == (
        'Error creating: pods "migrate-" is forbidden: error looking up service account'
        ' default/migrator: serviceaccount "migrator" not found'
    )
    assert event["involvedObject"]["kind"] == "Job"
    assert (kinds(kube, "migrate"), status(kube, "migrate").get("active")) == ([], 0)
    assert job_pods(core, "migrate") == []
    core.create_namespaced_service_account("default", {"metadata": {"name": "migrator"}})
    work.wait("Complete", lambda: "Complete" in kinds(kube, "migrate"))
    [pod] = job_pods(core, "migrate")
    [made] = work.events("default", uid, "SuccessfulCreate")
    assert made["message"] == f"Created pod: {pod.metadata.name}"


def test_a_quota_refusal_is_a_failed_create_too(kube: KubeEmulator, batch: Api) -> None:
    """apiserver pkg/admission/plugin/resourcequota/controller.go `checkRequest`: a Pod past
    a ResourceQuota's `pods` is refused, 403 "exceeded quota: <quota>, requested: pods=1,
    used: pods=0, limited: pods=0"; the Job controller records it as above."""
    work = kube_workloads.start(kube, time_scale=0.001)
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "no-pods", "namespace": "default"},
            "spec": {"hard": {"pods": "0"}},
        }
    )
    uid = batch.create_namespaced_job("default", job("migrate", "tool:1")).metadata.uid
    [event] = work.wait("FailedCreate", lambda: work.events("default", uid, "FailedCreate"))
    assert event["message"] == (
        'Error creating: pods "migrate-" is forbidden: exceeded quota: no-pods, requested:'
        " pods=1, used: pods=0, limited: pods=0"
    )


def test_success_is_success_criteria_met_then_complete_with_the_pod_counted_on_the_way(
    kube: KubeEmulator, core: Api, batch: Api
) -> None:
    """job_controller.go (v1.31+, delayTerminalCondition): `newSuccessCondition` gives
    `SuccessCriteriaMet` (reason CompletionsReached, "Reached expected number of succeeded
    pods", as test/e2e/apps/job.go expects), and `enactJobFinished` adds `Complete` with
    completionTime. `trackJobStatusAndRemoveFinalizers` first writes the Pod's uid into
    status.uncountedTerminatedPods, removes the Pod's tracking finalizer, then counts it;
    `ready` counts Ready active Pods; a `Completed` Event ends it."""
    work = kube_workloads.start(kube)
    statuses = _Statuses("migrate")
    kube.add_controller(statuses)
    uid = batch.create_namespaced_job("default", job("migrate", "tool:1")).metadata.uid
    pod = work.wait(
        "the Pod to run",
        lambda: [p for p in job_pods(core, "migrate") if p.status.phase == "Running"],
    )[0]
    assert pod.metadata.finalizers == [TRACKING]
    work.wait("ready 1", lambda: status(kube, "migrate").get("ready") == 1)
    work.exit("default", pod.metadata.name, "job", 0, "done\n")
    work.wait("Complete", lambda: "Complete" in kinds(kube, "migrate"))
    assert statuses.kinds() == [[], ["SuccessCriteriaMet"], ["SuccessCriteriaMet", "Complete"]]
    uncounted = [
        s for s in statuses.seen if (s.get("uncountedTerminatedPods") or {}).get("succeeded")
    ]
    assert uncounted and uncounted[0]["uncountedTerminatedPods"]["succeeded"] == [pod.metadata.uid]
    assert int(uncounted[0].get("succeeded") or 0) == 0
    final = status(kube, "migrate")
    assert (final["succeeded"], final["active"], final["ready"], final["terminating"]) == (
        1,
        0,
        0,
        0,
    )
    assert final["uncountedTerminatedPods"] == {}
    assert final["completionTime"]
    for condition in final["conditions"]:
        assert (condition["reason"], condition["message"]) == (
            "CompletionsReached",
            "Reached expected number of succeeded pods",
        )
    assert [e["message"] for e in work.events("default", uid, "Completed")] == ["Job completed"]
    assert job_pods(core, "migrate")[0].metadata.finalizers is None


def test_an_active_deadline_gives_failure_target_and_failed_only_once_the_pod_stopped(
    kube: KubeEmulator, core: Api, batch: Api
) -> None:
    """job_controller.go `syncJob`: past activeDeadlineSeconds (`pastActiveDeadline`) the
    Job gets `FailureTarget` with reason DeadlineExceeded, "Job was active longer than
    specified deadline", its active Pods are deleted (`deleteActivePods`, `SuccessfulDelete`
    Events) and counted as failed, and `enactJobFinished` adds `Failed` only once no Pod is
    terminating (status.terminating). The Pod is deleted gracefully
    (pkg/registry/core/pod/strategy.go `CheckGracefulDelete`) and its kubelet ends it: the
    process stops on SIGTERM here, after 5 s of its 30 s grace."""
    work = kube_workloads.start(kube, time_scale=0.01)
    work.script("tool:1", Script(seconds=3600, stop_seconds=5))
    statuses = _Statuses("slow")
    kube.add_controller(statuses)
    uid = batch.create_namespaced_job(
        "default", job("slow", "tool:1", activeDeadlineSeconds=1, backoffLimit=3)
    ).metadata.uid
    work.wait("Failed", lambda: "Failed" in kinds(kube, "slow"))
    assert statuses.kinds()[-2:] == [["FailureTarget"], ["FailureTarget", "Failed"]]
    [target] = [
        s
        for s in statuses.seen
        if [c["type"] for c in s.get("conditions") or []] == ["FailureTarget"]
    ][:1]
    assert target["terminating"] == 1
    final = status(kube, "slow")
    for condition in final["conditions"]:
        assert (condition["reason"], condition["message"]) == (
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        )
    assert (final["failed"], final["active"], final["terminating"]) == (1, 0, 0)
    assert [e["type"] for e in work.events("default", uid, "DeadlineExceeded")] == ["Warning"]
    assert len(work.events("default", uid, "SuccessfulDelete")) == 1
    assert job_pods(core, "slow") == []


def test_a_fail_job_rule_names_the_container_and_its_exit_code(
    kube: KubeEmulator, core: Api, batch: Api
) -> None:
    """pkg/controller/job/pod_failure_policy.go `matchPodFailurePolicy`: a `FailJob` rule
    on onExitCodes fails the Job whatever backoffLimit allows, FailureTarget then Failed
    with reason PodFailurePolicy and the message "Container <c> for pod <ns>/<pod> failed
    with exit code <n> matching FailJob rule at index <i>"."""
    work = kube_workloads.start(kube)
    work.script("tool:1", Script(exit_code=42))
    policy = {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
        ]
    }
    batch.create_namespaced_job(
        "default", job("migrate", "tool:1", backoffLimit=5, podFailurePolicy=policy)
    )
    work.wait("Failed", lambda: "Failed" in kinds(kube, "migrate"))
    [pod] = job_pods(core, "migrate")
    [failed] = [c for c in status(kube, "migrate")["conditions"] if c["type"] == "Failed"]
    assert (failed["reason"], failed["message"]) == (
        "PodFailurePolicy",
        f"Container job for pod default/{pod.metadata.name} failed with exit code 42 matching"
        " FailJob rule at index 1",
    )


def test_a_deleted_job_lets_its_pods_go(kube: KubeEmulator, core: Api, batch: Api) -> None:
    """job_controller.go `deleteJob` -> `cleanupPodFinalizers`: the Pods of a deleted Job
    lose their tracking finalizer, so the garbage collector's deletion of them completes."""
    work = kube_workloads.start(kube)
    batch.create_namespaced_job("default", job("gone", "tool:1"))
    work.wait("the Pod to run", lambda: job_pods(core, "gone"))
    batch.delete_namespaced_job("gone", "default", propagation_policy="Background")
    work.wait("the Pod to go", lambda: not job_pods(core, "gone"))
