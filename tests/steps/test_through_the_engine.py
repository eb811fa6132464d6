"""Kubernetes steps run by the engine in this process (no worker): what the run records.

An unreachable API server makes a step wait for its next attempt while the run goes on; a
missing management kubeconfig fails it at once; a
failed Job's log tail (the emulator's Job controller and kubelet run it) is kept on the
failed step; a step out of retries has its objects
cleaned up. The engine's clock is moved instead of waiting.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import override_settings

from tests.steps.conftest import NS, later, start
from tests.support.kube import KubeEmulator
from tests.support.kube_workloads import Script, Workloads
from workflows.engine import cleanups, scheduling
from workflows.models import StepRun

pytestmark = pytest.mark.django_db

JOB = {"image": "busybox:1.36", "command": ["false"], "namespace": NS}


def test_an_unreachable_api_server_retries_the_step_and_the_run_goes_on(
    kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.stop()
    run = start("BeforeClusterUpgrade", [{"name": "job", "type": "k8s_job", "with": JOB}])
    step = StepRun.objects.get(run=run)
    assert (run.state, step.state, step.failures) == ("running", "ready", 1)
    assert step.message == "API server unreachable"
    kube.start()
    later(monkeypatch, 600)
    scheduling.run_step(step.pk)
    step.refresh_from_db()
    assert (step.state, step.message) == ("waiting", f"Job {NS}/hooksvc-{run.pk}-job is running")
    assert len(kube.list_objects("batch", "v1", "jobs", NS)) == 1


def test_a_missing_management_kubeconfig_fails_the_step_at_once_naming_the_setting(
    tmp_path: Path,
) -> None:
    """hooksvc's own configuration does not heal by waiting: the canary of
    examples/rollouts.yaml retried "kubeconfig /root/.kube/config not found" for five
    minutes and never said which setting to fix (issue 33)."""
    missing = tmp_path / "config"
    steps = [{"name": "job", "type": "k8s_job", "retries": 5, "with": JOB}]
    with override_settings(KUBECONFIG_PATH=missing):
        run = start("BeforeClusterUpgrade", steps)
    step = StepRun.objects.get(run=run)
    assert (run.state, step.state, step.failures) == ("failed", "failed", 1)
    assert step.message == (
        f"kubeconfig {missing} not found: set HOOKSVC_KUBECONFIG to the management cluster's "
        "kubeconfig file, or run hooksvc in a Pod with a ServiceAccount"
    )


def test_a_failed_job_fails_the_run_and_its_log_tail_is_kept(
    kube: KubeEmulator, workloads: Workloads, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The emulator's Job controller and kubelet run the Job's pod, which fails.
    workloads.script("busybox:1.36", Script(exit_code=1, log="step 3 of 3: exit 1\n", seconds=20))
    run = start("BeforeClusterUpgrade", [{"name": "job", "type": "k8s_job", "with": JOB}])
    name = f"hooksvc-{run.pk}-job"

    def failed() -> bool:
        job = kube.get_object("batch", "v1", "jobs", NS, name) or {}
        return any(c["type"] == "Failed" for c in job.get("status", {}).get("conditions", []))

    workloads.wait("the Job to fail", failed)
    later(monkeypatch, 60)
    scheduling.run_step(StepRun.objects.get(run=run).pk)
    run.refresh_from_db()
    step = StepRun.objects.get(run=run)
    assert (step.state, step.message) == (
        "failed",
        f"Job {NS}/{name} failed (BackoffLimitExceeded)",
    )
    assert step.output["log"] == "step 3 of 3: exit 1\n"
    assert run.state == "failed"


def test_a_conformance_step_out_of_retries_deletes_what_it_made(
    kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = [{"name": "conformance", "type": "conformance", "retries": 0, "retryForSeconds": 0}]
    run = start("AfterClusterUpgrade", steps)
    name = f"hooksvc-{run.pk}-conformance"
    assert kube.get_object("", "v1", "namespaces", None, name) is not None
    # The Pod's read fails once: with no retry left the engine fails the step, and cleans up.
    kube.fail_next("GET", "/pods/e2e-conformance$", 503)
    later(monkeypatch, 60)
    scheduling.run_step(StepRun.objects.get(run=run).pk)
    step = StepRun.objects.get(run=run)
    assert step.state == "failed"
    # The failure sends the workflows.step_cleanup task; here it runs in process.
    assert cleanups.step_cleanup(step.pk) is True
    assert kube.get_object("", "v1", "namespaces", None, name) is None
    assert (
        kube.get_object("rbac.authorization.k8s.io", "v1", "clusterrolebindings", None, name)
        is None
    )
