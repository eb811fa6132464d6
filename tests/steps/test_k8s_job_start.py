"""`k8s_job` against a Job controller and a kubelet that cannot start its pod, or have decided.

The emulator's controllers act as upstream's (tests/support/kube_jobs.py, kube_kubelet.py,
kube_admission.py): a pod the API server refuses gives the Job `FailedCreate` Events and no
condition, forever; a container that cannot be created waits with the kubelet's reason;
the Job controller writes `FailureTarget` (and `SuccessCriteriaMet`) before the terminal
condition, and counts a pod in `uncountedTerminatedPods` before its counters. The step fails
such a Job with the reason after `stuckGraceSeconds` (workflows.clock, which the tests hold), or
at once on the interim condition.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.steps.conftest import Context, at_epoch, run
from tests.steps.test_k8s_job import (
    IMAGE,
    JOBS,
    NAME,
    PARAMS,
    conditions,
    job_pods,
    ops,  # noqa: F401 (an autouse fixture: the namespace and its ServiceAccount)
)
from tests.support import kube_workloads
from tests.support.kube import KubeEmulator
from tests.support.kube_workloads import RuntimeFailure, Script, Workloads
from workflows import errors
from workflows.steps import registry

REFUSED = (
    'Error creating: pods "hooksvc-7-migrate-" is forbidden: error looking up service account'
    ' ops/migrator: serviceaccount "migrator" not found'
)


def at(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    at_epoch(monkeypatch, 1_000.0 + seconds)


def failed_creates(work: Workloads, kube: KubeEmulator) -> list[dict[str, Any]]:
    job = kube.get_object(*JOBS, "ops", NAME)
    return work.events("ops", job["metadata"]["uid"], "FailedCreate") if job else []


def test_a_job_whose_pod_is_never_created_fails_with_failed_create_after_the_grace(
    kube: KubeEmulator, workloads: Workloads, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubernetes v1.33 pkg/controller/job/job_controller.go `manageJob` and
    pkg/controller/controller_utils.go `RealPodControl.CreatePods`: a pod the API server
    refuses (here the ServiceAccount admission plugin, plugin/pkg/admission/serviceaccount/
    admission.go: the Job's ServiceAccount does not exist) is a `FailedCreate` Event on the
    Job, no condition, and another try later, forever. The step waits `stuckGraceSeconds`,
    then fails with the reason (the Event's message in the output) and deletes the Job."""
    kube.delete_object("", "v1", "serviceaccounts", "ops", "migrator")
    ctx = context("k8s_job", {**PARAMS, "stuckGraceSeconds": 120}, step_name="migrate")
    at(monkeypatch, 0)
    run(ctx)
    workloads.wait("FailedCreate", lambda: failed_creates(workloads, kube))
    waiting = run(ctx)
    assert waiting == registry.Poll(
        after=10, message=f"Job ops/{NAME} is waiting: the Pod cannot be created (FailedCreate)"
    )
    at(monkeypatch, 119)
    assert isinstance(run(ctx), registry.Poll)
    at(monkeypatch, 120)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        f"Job ops/{NAME} is stuck: the Pod cannot be created (FailedCreate)"
    )
    assert exc.value.output is not None
    assert exc.value.output["stuck"] == {"reason": "FailedCreate", "detail": REFUSED}
    assert kube.get_object(*JOBS, "ops", NAME) is None


def test_a_pod_created_within_the_grace_runs_and_the_grace_starts_over(
    kube: KubeEmulator, workloads: Workloads, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Job controller tries the refused create again (job_controller.go: the sync's
    error requeues the Job with backoff): once the ServiceAccount exists, its next try makes
    the pod. An older FailedCreate Event no longer counts once a pod is newer than it."""
    kube.delete_object("", "v1", "serviceaccounts", "ops", "migrator")
    ctx = context("k8s_job", {**PARAMS, "stuckGraceSeconds": 60}, step_name="migrate")
    at(monkeypatch, 0)
    run(ctx)
    workloads.wait("FailedCreate", lambda: failed_creates(workloads, kube))
    assert "FailedCreate" in run(ctx).message  # type: ignore[union-attr]
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "migrator", "namespace": "ops"},
        }
    )
    pod = workloads.wait("the pod", lambda: job_pods(kube))[0]["metadata"]["name"]
    workloads.wait("it runs", lambda: workloads.pod("ops", pod)["status"]["phase"] == "Running")
    at(monkeypatch, 59)
    assert run(ctx) == registry.Poll(after=10, message=f"Job ops/{NAME} is running")
    assert "troubleSince" not in ctx.memo
    workloads.exit("ops", pod, "job", 0, "migrated\n")
    workloads.wait("Complete", lambda: "Complete" in conditions(kube))
    at(monkeypatch, 600)
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert done.output["log"] == "migrated\n"


def test_a_container_the_runtime_cannot_create_fails_the_step_after_the_grace(
    kube: KubeEmulator, workloads: Workloads, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go `startContainer`: a
    container the runtime cannot create waits with `CreateContainerError` (the runtime's
    message), tried again at each sync; the Job has no condition and never ends. The step
    fails after `stuckGraceSeconds` with the reason, and deletes the Job."""
    failure = RuntimeFailure("create", "failed to reserve container name")
    reason, words = "CreateContainerError", "cannot be created by the container runtime"
    workloads.runtime_fails(IMAGE, failure)
    ctx = context("k8s_job", {**PARAMS, "stuckGraceSeconds": 30}, step_name="migrate")
    at(monkeypatch, 0)
    run(ctx)
    pod = workloads.wait("the pod", lambda: job_pods(kube))[0]["metadata"]["name"]
    workloads.wait(reason, lambda: workloads.waiting_reason("ops", pod, "job") == reason)
    assert run(ctx) == registry.Poll(
        after=10, message=f"Job ops/{NAME} is waiting: container job {words} ({reason})"
    )
    at(monkeypatch, 30)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == f"Job ops/{NAME} is stuck: container job {words} ({reason})"
    assert exc.value.output is not None
    assert exc.value.output["stuck"] == {
        "container": "job",
        "reason": reason,
        "detail": failure.message,
    }
    assert kube.get_object(*JOBS, "ops", NAME) is None


def test_a_container_that_cannot_start_fails_the_job_with_its_start_error(
    kube: KubeEmulator, context: Context
) -> None:
    """containerd reports a container it could not start as exited, reason `StartError`, exit
    code 128 (containerd internal/cri/server/helpers.go); the Job's pod (restartPolicy Never)
    is Failed and counts towards backoffLimit (job_controller.go). The step fails with the
    Job's reason, and the output says how the container ended."""
    message = 'exec: "migrate": executable file not found in $PATH'
    workloads = kube_workloads.start(kube, nodes=[])  # no Node yet: the pod waits unbound
    workloads.runtime_fails(IMAGE, RuntimeFailure("start", message))
    ctx = context("k8s_job", {**PARAMS, "backoffLimit": 0}, step_name="migrate")
    assert isinstance(run(ctx), registry.Poll)
    kube.put_object(kube_workloads.node("worker-1"))
    workloads.wait("FailureTarget", lambda: "FailureTarget" in conditions(kube))
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == f"Job ops/{NAME} failed (BackoffLimitExceeded)"
    assert exc.value.output is not None
    assert exc.value.output["container"] == {
        "exitCode": 128,
        "reason": "StartError",
        "message": message,
    }
    assert exc.value.output["log"] == ""


def test_a_job_past_its_deadline_is_failing_at_failure_target_before_failed(
    kube: KubeEmulator, context: Context
) -> None:
    """job_controller.go (v1.31+, `delayTerminalCondition`): past `activeDeadlineSeconds`
    the Job gets `FailureTarget` (reason DeadlineExceeded) at once, and `Failed` only once
    its pod has stopped: here the process ignores SIGTERM and is killed when its 30 s grace
    period ends. The step reads the first as the controller's verdict, and fails with the
    reason while the pod still terminates, instead of saying the Job is running."""
    work = kube_workloads.start(kube, time_scale=1.0)
    ctx = context("k8s_job", {**PARAMS, "activeDeadlineSeconds": 1}, step_name="migrate")
    run(ctx)
    work.wait("FailureTarget", lambda: "FailureTarget" in conditions(kube))
    assert "Failed" not in conditions(kube), "the pod takes its 30 s grace period to stop"
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == f"Job ops/{NAME} failed (DeadlineExceeded)"
    assert exc.value.output is not None
    assert exc.value.output["condition"] == {
        "type": "FailureTarget",
        "reason": "DeadlineExceeded",
        "message": "Job was active longer than specified deadline",
    }
    step_type = registry.get("k8s_job")
    assert step_type.cleanup is not None
    step_type.cleanup(ctx)
    assert kube.get_object(*JOBS, "ops", NAME) is not None, "a failing Job is left to its TTL"


def test_a_pod_counted_but_not_yet_in_the_counters_is_in_the_output(
    kube: KubeEmulator, context: Context
) -> None:
    """job_controller.go `trackJobStatusAndRemoveFinalizers` writes a finished pod's uid into
    status.uncountedTerminatedPods with SuccessCriteriaMet, removes the pod's finalizer,
    and only then moves it to `succeeded`: a step reading in between sees succeeded 0. The
    Job below is as the controller writes it at that moment; the output counts the pod."""
    ctx = context("k8s_job", {**PARAMS, "cluster": "management"}, step_name="migrate")
    run(ctx)
    job = kube.get_object(*JOBS, "ops", NAME)
    assert job is not None
    job["status"] = {
        "startTime": "2026-01-01T00:00:00Z",
        "active": 0,
        "ready": 0,
        "terminating": 0,
        "uncountedTerminatedPods": {"succeeded": ["6b1f6a52-0d1e-4c7a-9a53-0c7f1e2b3a4d"]},
        "conditions": [
            {
                "type": "SuccessCriteriaMet",
                "status": "True",
                "reason": "CompletionsReached",
                "message": "Reached expected number of succeeded pods",
            }
        ],
    }
    kube.put_object(job)
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert (done.output["succeeded"], done.output["failed"]) == (1, 0)
    assert done.output["condition"]["type"] == "SuccessCriteriaMet"


def test_a_job_whose_pods_script_exits_is_done_with_the_scripts_log(
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    """The whole way through the controllers: SuccessCriteriaMet, then Complete."""
    workloads.script(IMAGE, Script(log="ok\n", seconds=1))
    ctx = context("k8s_job", PARAMS, step_name="migrate")
    run(ctx)
    workloads.wait("Complete", lambda: "Complete" in conditions(kube))
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert (done.output["succeeded"], done.output["log"]) == (1, "ok\n")


def test_a_job_whose_newest_pod_never_ran_fails_with_its_reason_not_a_log_error(
    kube: KubeEmulator, context: Context
) -> None:
    """The Job's pod is evicted while its image is still being pulled (the Job's
    podFailurePolicy ignores it, and its replacement waits out the Job controller's 10 s
    backoff, job_controller.go backoff_utils.go); meanwhile the Job passes its
    activeDeadlineSeconds (FailureTarget, then Failed: DeadlineExceeded). The newest pod's
    container never ran, and the kubelet answers a request for its log with 400 (kubernetes
    pkg/kubelet/kubelet_pods.go `validateContainerLogStatus`: "... is terminated"). Before,
    the step failed with "log of Pod ...: API server answered 400 Bad Request"; now it
    fails with the Job's reason and an empty log."""
    work = kube_workloads.start(kube, time_scale=1.0)
    work.unpullable(IMAGE)
    ctx = context("k8s_job", {**PARAMS, "activeDeadlineSeconds": 2}, step_name="migrate")
    run(ctx)
    pod = work.wait("the pod", lambda: job_pods(kube))[0]["metadata"]["name"]
    work.wait("the failed pull", lambda: work.waiting_reason("ops", pod, "job"))
    work.disrupt("ops", pod)
    work.wait("Failed", lambda: "Failed" in conditions(kube))
    assert [p["metadata"]["name"] for p in job_pods(kube)] == [pod], "no replacement yet"
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == f"Job ops/{NAME} failed (DeadlineExceeded)"
    assert exc.value.output is not None
    assert exc.value.output["log"] == ""
