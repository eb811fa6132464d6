"""`k8s_job` against the emulator's Job controller, TTL controller, scheduler and kubelet.

The controllers (tests/support/kube_jobs.py, kube_workloads.py) create the Job's pods, run
them and write the Job's status; the test plays the process in the pod's container (it ends
with a log) and the disruptions. Covered: the Job it creates (with a podFailurePolicy that
ignores disruptions), once however often the start runs; success and failure with the log
tail; a disrupted pod not counting against `backoffLimit`; a pod whose image cannot be
pulled failing the step after the grace; a TTL shorter than the poll refused at apply, and
a Job its TTL deleted before it was read; the management cluster; an unreachable API
server; `cleanup` (cancel, timeout) stopping a running Job and leaving a finished one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests.steps.conftest import CLUSTER, NS, Context, at_epoch, run
from tests.support import kube_workloads
from tests.support.kube import KubeEmulator
from tests.support.kube_workloads import Script, Workloads
from workflows import errors
from workflows.models import WorkflowTemplate
from workflows.steps import registry

JOBS = ("batch", "v1", "jobs")
NAME = "hooksvc-7-migrate"
IMAGE = "registry.example.com/tools:1.2"
PARAMS: dict[str, Any] = {
    "image": IMAGE,
    "command": ["/bin/sh", "-c"],
    "args": ["migrate --all"],
    "env": {"TARGET": "prod", "MODE": "safe"},
    "serviceAccountName": "migrator",
    "namespace": "ops",
    "backoffLimit": 2,
}
MIGRATOR = {
    "apiVersion": "v1",
    "kind": "ServiceAccount",
    "metadata": {"name": "migrator", "namespace": "ops"},
}


@pytest.fixture(autouse=True)
def ops(kube: KubeEmulator) -> None:
    """The Job's namespace and its ServiceAccount (the ServiceAccount admission plugin
    refuses a pod whose ServiceAccount does not exist)."""
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ops"}})
    kube.put_object(MIGRATOR)


def job_pods(kube: KubeEmulator) -> list[dict[str, Any]]:
    found = kube.list_objects("", "v1", "pods", "ops")
    mine = [p for p in found if (p["metadata"].get("labels") or {}).get("job-name") == NAME]
    return sorted(mine, key=lambda p: p["metadata"]["creationTimestamp"])


def running_pod(work: Workloads, kube: KubeEmulator, count: int = 1) -> str:
    """The name of the Job's running pod, once it has made `count` pods."""

    def running() -> str:
        found = job_pods(kube)
        names = [
            p["metadata"]["name"]
            for p in found
            if (p.get("status") or {}).get("phase") == "Running"
        ]
        return names[0] if len(found) >= count and names else ""

    return str(work.wait(f"pod {count} to run", running))


def failed(kube: KubeEmulator) -> int:
    job = kube.get_object(*JOBS, "ops", NAME) or {}
    return int((job.get("status") or {}).get("failed") or 0)


def conditions(kube: KubeEmulator) -> list[str]:
    job = kube.get_object(*JOBS, "ops", NAME) or {}
    return [c["type"] for c in (job.get("status") or {}).get("conditions") or []]


def test_it_creates_the_job_once_and_is_done_when_it_succeeds(
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    """The Job controller runs the pod and adds Complete once it succeeded (Jobs page)."""
    ctx = context("k8s_job", PARAMS, step_name="migrate")
    assert run(ctx) == registry.Poll(after=10, message=f"Job ops/{NAME} is running")
    assert isinstance(run(context("k8s_job", PARAMS, step_name="migrate")), registry.Poll)
    [job] = kube.list_objects(*JOBS)
    assert job["metadata"]["name"] == NAME
    assert job["metadata"]["namespace"] == "ops"
    labels = {"hooksvc.io/run": "7", "hooksvc.io/step": "migrate"}
    assert job["metadata"]["labels"] == labels
    assert job["spec"] == {
        "backoffLimit": 2,
        "podFailurePolicy": {
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        },
        "ttlSecondsAfterFinished": 86400,
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "restartPolicy": "Never",
                "serviceAccountName": "migrator",
                "containers": [
                    {
                        "name": "job",
                        "image": IMAGE,
                        "command": ["/bin/sh", "-c"],
                        "args": ["migrate --all"],
                        "env": [
                            {"name": "MODE", "value": "safe"},
                            {"name": "TARGET", "value": "prod"},
                        ],
                    }
                ],
            },
        },
    }
    pod = running_pod(workloads, kube)
    workloads.exit("ops", pod, "job", 0, "".join(f"line {i}\n" for i in range(100)))
    workloads.wait("Complete", lambda: "Complete" in conditions(kube))
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert (done.output["job"], done.output["succeeded"]) == ({"namespace": "ops", "name": NAME}, 1)
    assert done.output["log"] == "".join(f"line {i}\n" for i in range(50, 100))
    assert len(job_pods(kube)) == 1


def test_a_job_that_fails_past_its_backoff_limit_fails_the_step_with_its_log_tail(
    kube: KubeEmulator, context: Context
) -> None:
    """Pod backoff failure policy (Jobs page): each failed pod is replaced, after 10 s then
    20 s (here 1 s, 2 s: pods of different seconds), while `failed` stays within
    backoffLimit; past it the Job gets Failed (BackoffLimitExceeded). The log is the last
    pod's."""
    workloads = kube_workloads.start(kube, time_scale=0.1)
    ctx = context("k8s_job", PARAMS, step_name="migrate")
    run(ctx)
    for attempt in (1, 2):
        workloads.exit("ops", running_pod(workloads, kube, attempt), "job", 1, "retrying\n")
        workloads.wait(f"{attempt} failures", lambda: failed(kube) == attempt)  # noqa: B023
        assert isinstance(run(ctx), registry.Poll), f"{attempt} failures are within backoffLimit 2"
    workloads.exit(
        "ops", running_pod(workloads, kube, 3), "job", 1, "error: relation users does not exist\n"
    )
    workloads.wait("Failed", lambda: "Failed" in conditions(kube))
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == f"Job ops/{NAME} failed (BackoffLimitExceeded)"
    assert exc.value.output is not None
    assert exc.value.output["failed"] == 3
    assert exc.value.output["log"] == "error: relation users does not exist\n"


@pytest.mark.parametrize("code", [0, 1])
def test_a_log_the_kubelet_cannot_give_leaves_the_jobs_outcome_and_says_so(
    kube: KubeEmulator, workloads: Workloads, context: Context, code: int
) -> None:
    """kubernetes pkg/registry/core/pod/rest/log.go: the API server reads a log through the
    pod's kubelet; one it cannot reach is a 500 (apiserver endpoints/handlers/
    responsewriters/status.go ErrorToAPIStatus), for as long as the Node is away. The tail
    made a finished Job's step retry and then fail on it; the Job's outcome now stands."""
    ctx = context("k8s_job", {**PARAMS, "backoffLimit": 0}, step_name="migrate")
    run(ctx)
    workloads.exit("ops", running_pod(workloads, kube), "job", code, "done\n")
    finished = "Complete" if code == 0 else "Failed"
    workloads.wait(finished, lambda: finished in conditions(kube))
    kube.fail_next("GET", r"/pods/[^/]+/log", 500, times=100)
    pod = kube.list_objects("", "v1", "pods", "ops")[-1]["metadata"]["name"]
    if code == 0:
        done = run(ctx)
        assert isinstance(done, registry.Done)
        output = done.output
    else:
        with pytest.raises(errors.PermanentError) as exc:
            run(ctx)
        assert exc.value.message == (
            f"Job ops/{NAME} failed (BackoffLimitExceeded); its log could not be read"
        )
        output = exc.value.output or {}
    assert output["log"] == ""
    assert output["logUnavailable"] == (
        f"the log of Pod ops/{pod} could not be read (API server answered 500)"
    )


def test_a_disrupted_pod_does_not_count_against_the_backoff_limit(
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    """Pod failure policy (Jobs page): the rule `Ignore` on `DisruptionTarget` keeps a pod
    evicted by a Node drain (an upgrade's) from spending backoffLimit: the Job controller
    replaces it. Without the rule this Job, backoffLimit 0, would fail."""
    ctx = context("k8s_job", {**PARAMS, "backoffLimit": 0}, step_name="migrate")
    run(ctx)
    workloads.disrupt("ops", running_pod(workloads, kube))
    second = running_pod(workloads, kube, 2)
    assert isinstance(run(ctx), registry.Poll)
    workloads.exit("ops", second, "job", 0, "migrated\n")
    workloads.wait("Complete", lambda: "Complete" in conditions(kube))
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert (done.output["failed"], done.output["succeeded"], done.output["log"]) == (
        0,
        1,
        "migrated\n",
    )


def test_an_image_that_cannot_be_pulled_fails_the_step_after_the_grace(
    kube: KubeEmulator, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet keeps a pod whose image cannot be pulled waiting in ErrImagePull and
    ImagePullBackOff (kubernetes pkg/kubelet/images/image_manager.go) and the Job never
    ends by itself; after `stuckGraceSeconds` the step fails with the reason and deletes
    the Job."""
    work = kube_workloads.start(kube, time_scale=1.0)  # ImagePullBackOff for 9 s at a time
    work.unpullable(IMAGE)
    ctx = context("k8s_job", {**PARAMS, "stuckGraceSeconds": 60}, step_name="migrate")
    at_epoch(monkeypatch, 1000.0)
    run(ctx)
    pod = work.wait("the pod", lambda: job_pods(kube))[0]["metadata"]["name"]
    work.wait("the back-off", lambda: work.waiting_reason("ops", pod, "job") == "ImagePullBackOff")
    assert run(ctx) == registry.Poll(
        after=10,
        message=(
            f"Job ops/{NAME} is waiting: container job cannot pull its image (ImagePullBackOff)"
        ),
    )
    at_epoch(monkeypatch, 1059.0)
    assert isinstance(run(ctx), registry.Poll)
    at_epoch(monkeypatch, 1060.0)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        f"Job ops/{NAME} is stuck: container job cannot pull its image (ImagePullBackOff)"
    )
    assert exc.value.output is not None
    assert exc.value.output["stuck"] == {
        "container": "job",
        "reason": "ImagePullBackOff",
        "detail": f'Back-off pulling image "{IMAGE}"',
    }
    assert kube.get_object(*JOBS, "ops", NAME) is None


@pytest.mark.parametrize(
    ("ttl", "poll", "error"),
    [
        (5, 10, "must be at least pollSeconds (10)"),
        (0, 1, "must be at least pollSeconds (1)"),
        (10, 10, None),
    ],
)
def test_a_ttl_shorter_than_the_poll_interval_is_refused(
    ttl: int, poll: int, error: str | None
) -> None:
    """TTL-after-finished (ttlafterfinished page): the Job is deleted `ttl` seconds after it
    finishes, so with a shorter TTL than the poll its outcome could be gone when read."""
    given = {"image": IMAGE, "ttlSecondsAfterFinished": ttl, "pollSeconds": poll}
    if error is None:
        registry.validate("k8s_job", given, hook="BeforeClusterUpgrade")
        return
    with pytest.raises(registry.ParamError) as exc:
        registry.validate("k8s_job", given, hook="BeforeClusterUpgrade")
    assert exc.value.field == "ttlSecondsAfterFinished"
    assert str(exc.value).startswith(f"ttlSecondsAfterFinished: {error}: the Job is deleted")


@pytest.mark.django_db
def test_apply_workflows_refuses_the_template_and_writes_nothing(tmp_path: Path) -> None:
    document = tmp_path / "workflows.yaml"
    document.write_text(
        "apiVersion: hooksvc/v1alpha1\nkind: WorkflowTemplate\nmetadata: {name: migrate}\n"
        "spec:\n  hook: BeforeClusterUpgrade\n  steps:\n  - name: migrate\n    type: k8s_job\n"
        f"    with: {{image: {IMAGE}, ttlSecondsAfterFinished: 5}}\n"
    )
    with pytest.raises(CommandError) as exc:
        call_command("apply_workflows", "-f", str(document))
    assert "ttlSecondsAfterFinished: must be at least pollSeconds (10)" in str(exc.value)
    assert not WorkflowTemplate.objects.exists()


def test_a_job_its_ttl_deleted_before_it_was_read_fails_saying_so(
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    """The TTL-after-finished controller deletes the finished Job (here 10 s, scaled to
    0.1 s) before a late poll reads it: the step can only say so."""
    ctx = context(
        "k8s_job", {**PARAMS, "ttlSecondsAfterFinished": 10, "pollSeconds": 10}, step_name="migrate"
    )
    run(ctx)
    workloads.exit("ops", running_pod(workloads, kube), "job", 0)
    workloads.wait("the TTL", lambda: kube.get_object(*JOBS, "ops", NAME) is None)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == f"Job ops/{NAME} was deleted before the step read its outcome"


def test_in_the_management_cluster_it_needs_no_workload_kubeconfig(
    kube: KubeEmulator, context: Context
) -> None:
    kube.delete_object("", "v1", "secrets", NS, f"{CLUSTER}-kubeconfig")
    ctx = context("k8s_job", {**PARAMS, "cluster": "management"}, step_name="migrate")
    assert isinstance(run(ctx), registry.Poll)
    with pytest.raises(errors.TemporaryError) as exc:
        run(context("k8s_job", PARAMS, step_name="migrate"))
    assert exc.value.message == f"kubeconfig Secret {NS}/{CLUSTER}-kubeconfig not found"


def test_an_unreachable_api_server_is_retried_without_a_second_job(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = context("k8s_job", PARAMS, step_name="migrate")
    kube.fail_next("POST", "/jobs$", 503)
    with pytest.raises(errors.TemporaryError) as exc:
        run(ctx)
    assert exc.value.message == f"Job ops/{NAME}: API server answered 503 Service Unavailable"
    assert isinstance(run(ctx), registry.Poll)
    assert len(kube.list_objects(*JOBS)) == 1


@pytest.mark.parametrize(
    "case",
    [
        (None, "", True),
        (Script(exit_code=1, seconds=20), "Failed", False),
        (Script(seconds=20), "Complete", False),
    ],
    ids=["running", "failed", "succeeded"],
)
def test_cleanup_stops_a_running_job_and_leaves_a_finished_one(
    kube: KubeEmulator,
    workloads: Workloads,
    context: Context,
    case: tuple[Script | None, str, bool],
) -> None:
    script, condition, deleted = case
    if script is not None:
        workloads.script(IMAGE, script)
    params = {**PARAMS, "cluster": "management", "backoffLimit": 0}
    ctx = context("k8s_job", params, step_name="migrate")
    step_type = registry.get("k8s_job")
    assert step_type.cleanup is not None
    step_type.cleanup(ctx)  # before the Job was created: nothing to do
    run(ctx)
    if condition:
        workloads.wait(condition, lambda: condition in conditions(kube))
    else:
        running_pod(workloads, kube)
    step_type.cleanup(ctx)
    assert (kube.get_object(*JOBS, "ops", NAME) is None) is deleted
