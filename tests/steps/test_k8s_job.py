"""`k8s_job` against the emulator: the Job it creates, success, failure and its log tail.

The test plays the Job controller and the kubelet: it puts the Job's pod (labelled
`job-name`), serves its log and sets the Job's status. `cleanup` (cancel, timeout) stops a
running Job and leaves a finished one.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.steps.conftest import CLUSTER, NS, Context, run
from tests.support.kube import KubeEmulator
from workflows import errors
from workflows.steps import registry

JOBS = ("batch", "v1", "jobs")
NAME = "hooksvc-7-migrate"
PARAMS: dict[str, Any] = {
    "image": "registry.example.com/tools:1.2",
    "command": ["/bin/sh", "-c"],
    "args": ["migrate --all"],
    "env": {"TARGET": "prod", "MODE": "safe"},
    "serviceAccountName": "migrator",
    "namespace": "ops",
    "backoffLimit": 2,
}


@pytest.fixture(autouse=True)
def ops(kube: KubeEmulator) -> None:
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ops"}})


def job_pod(kube: KubeEmulator, log: str, name: str = f"{NAME}-x7k2p") -> None:
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "ops", "labels": {"job-name": NAME}},
            "spec": {"containers": [{"name": "job", "image": "x"}]},
        }
    )
    kube.set_pod_log("ops", name, log)


def test_it_creates_the_job_once_and_is_done_when_it_succeeds(
    kube: KubeEmulator, context: Context
) -> None:
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
        "ttlSecondsAfterFinished": 86400,
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "restartPolicy": "Never",
                "serviceAccountName": "migrator",
                "containers": [
                    {
                        "name": "job",
                        "image": "registry.example.com/tools:1.2",
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
    job_pod(kube, "".join(f"line {i}\n" for i in range(100)))
    kube.set_status(
        *JOBS, "ops", NAME, {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    )
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert done.output["job"] == {"namespace": "ops", "name": NAME}
    assert done.output["log"] == "".join(f"line {i}\n" for i in range(50, 100))


@pytest.mark.parametrize(
    "status",
    [
        {"failed": 3},
        {
            "failed": 1,
            "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}],
        },
    ],
    ids=["backoff limit reached", "failed condition"],
)
def test_a_failed_job_fails_the_step_with_its_log_tail(
    kube: KubeEmulator, context: Context, status: dict[str, Any]
) -> None:
    ctx = context("k8s_job", PARAMS, step_name="migrate")
    run(ctx)
    kube.set_status(*JOBS, "ops", NAME, {"failed": 2})
    assert isinstance(run(ctx), registry.Poll), "two failures are within backoffLimit 2"
    job_pod(kube, "error: relation users does not exist\n")
    kube.set_status(*JOBS, "ops", NAME, status)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == f"Job ops/{NAME} failed"
    assert exc.value.output is not None
    assert exc.value.output["log"] == "error: relation users does not exist\n"


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
    ("status", "deleted"),
    [({}, True), ({"failed": 3}, False), ({"succeeded": 1}, False)],
    ids=["running", "failed", "succeeded"],
)
def test_cleanup_stops_a_running_job_and_leaves_a_finished_one(
    kube: KubeEmulator, context: Context, status: dict[str, Any], deleted: bool
) -> None:
    ctx = context("k8s_job", {**PARAMS, "cluster": "management"}, step_name="migrate")
    step_type = registry.get("k8s_job")
    assert step_type.cleanup is not None
    step_type.cleanup(ctx)  # before the Job was created: nothing to do
    run(ctx)
    if status:
        kube.set_status(*JOBS, "ops", NAME, status)
    step_type.cleanup(ctx)
    assert (kube.get_object(*JOBS, "ops", NAME) is None) is deleted
