"""Kubernetes steps run by the engine in this process (no worker): what the run records.

An unreachable API server makes a step wait for its next attempt while the run goes on; a
failed Job's log tail is kept on the failed step; a step out of retries has its objects
cleaned up. The engine's clock is moved instead of waiting.
"""

from __future__ import annotations

import pytest

from tests.steps.conftest import NS, later, start
from tests.support.kube import KubeEmulator
from workflows import engine
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
    engine.run_step(step.pk)
    step.refresh_from_db()
    assert (step.state, step.message) == ("waiting", f"Job {NS}/hooksvc-{run.pk}-job is running")
    assert len(kube.list_objects("batch", "v1", "jobs", NS)) == 1


def test_a_failed_job_fails_the_run_and_its_log_tail_is_kept(
    kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = start("BeforeClusterUpgrade", [{"name": "job", "type": "k8s_job", "with": JOB}])
    name = f"hooksvc-{run.pk}-job"
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{name}-abcde", "namespace": NS, "labels": {"job-name": name}},
        }
    )
    kube.set_pod_log(NS, f"{name}-abcde", "step 3 of 3: exit 1\n")
    kube.set_status("batch", "v1", "jobs", NS, name, {"failed": 1})
    later(monkeypatch, 60)
    engine.run_step(StepRun.objects.get(run=run).pk)
    run.refresh_from_db()
    step = StepRun.objects.get(run=run)
    assert (step.state, step.message) == ("failed", f"Job {NS}/{name} failed")
    assert step.output["log"] == "step 3 of 3: exit 1\n"
    assert run.state == "failed"


def test_a_conformance_step_out_of_retries_deletes_what_it_made(
    kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = [{"name": "conformance", "type": "conformance", "retries": 0}]
    run = start("AfterClusterUpgrade", steps)
    name = f"hooksvc-{run.pk}-conformance"
    assert kube.get_object("", "v1", "namespaces", None, name) is not None
    # The Pod's read fails once: with no retry left the engine fails the step, and cleans up.
    kube.fail_next("GET", "/pods/e2e-conformance$", 503)
    later(monkeypatch, 60)
    engine.run_step(StepRun.objects.get(run=run).pk)
    step = StepRun.objects.get(run=run)
    assert step.state == "failed"
    assert kube.get_object("", "v1", "namespaces", None, name) is None
    assert (
        kube.get_object("rbac.authorization.k8s.io", "v1", "clusterrolebindings", None, name)
        is None
    )
