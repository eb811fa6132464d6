"""`conformance` through the engine: its two-hour default timeout, and cleanup after it.

The engine times the step out and deletes its Namespace and ClusterRoleBinding; an
operator's cancel sends the cleanup task, whose failure, retry and race with a retry of the
run are covered here. `tests/steps/test_conformance.py` has the step itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.steps.conftest import later, start
from tests.steps.test_conformance import FAILED_LOG, RBAC, end_pod
from tests.support.kube import KubeEmulator
from tests.support.kube_workloads import Workloads
from workflows.engine import cleanups, scheduling
from workflows.models import Run, RunEvent, StepRun
from workflows.operators import actions


@pytest.mark.django_db
def test_the_engine_times_it_out_after_two_hours_by_default_and_it_cleans_up(
    kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_ = start(
        "AfterClusterUpgrade",
        [{"name": "conformance", "type": "conformance"}],
        name="conformance-after-upgrade",
    )
    step = StepRun.objects.get(run=run_)
    assert (step.state, step.timeout_seconds) == ("waiting", 7200)
    name = f"hooksvc-{run_.pk}-conformance"
    assert kube.get_object("", "v1", "namespaces", None, name) is not None
    later(monkeypatch, 7201)
    scheduling.run_step(step.pk)
    step.refresh_from_db()
    assert (step.state, step.message) == ("failed", "timed out after 7200 s")
    # The failure sends the workflows.step_cleanup task; here it runs in process.
    assert cleanups.step_cleanup(step.pk) is True
    assert kube.get_object("", "v1", "namespaces", None, name) is None
    assert kube.get_object(*RBAC, None, name) is None


@pytest.mark.django_db
def test_a_failed_runs_cleanup_meets_its_namespace_still_terminating_and_ran(
    kube: KubeEmulator, workloads: Workloads, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step deletes its Namespace when its tests fail, then the engine's cleanup deletes
    it again while it terminates. kubernetes pkg/registry/core/namespace/storage/storage.go
    `REST.Delete` (kubernetes 94341df; since v1.17, kubernetes/kubernetes#84122): a DELETE
    of a Namespace whose spec.finalizers are pending answers 200 with the Namespace as it is
    (the NamespaceLifecycle admission plugin lets every namespace DELETE through but the
    immortal namespaces'). The emulator answered 409 Conflict, as kube-apiserver did before,
    and the cleanup after nearly every failed run was recorded as failed."""
    run_ = start(
        "AfterClusterUpgrade",
        [{"name": "conformance", "type": "conformance"}],
        name="conformance-after-upgrade",
    )
    step = StepRun.objects.get(run=run_)
    name = f"hooksvc-{run_.pk}-conformance"
    # Content with a finalizer of its own keeps the Namespace terminating.
    held = {"name": "held", "namespace": name, "finalizers": ["example.com/hold"]}
    kube.put_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": held})
    end_pod(workloads, "Failed", FAILED_LOG, name=name)
    later(monkeypatch, 3600)
    scheduling.run_step(step.pk)
    step.refresh_from_db()
    assert step.state == "failed", step.message
    namespace = kube.get_object("", "v1", "namespaces", None, name) or {}
    assert namespace["status"]["phase"] == "Terminating"
    assert cleanups.step_cleanup(step.pk) is True
    assert RunEvent.objects.get(run=run_, name="cleanup").message == (
        "cleanup of failed step conformance ran"
    )


@pytest.mark.django_db
def test_a_template_timeout_replaces_the_default() -> None:
    run_ = start(
        "AfterClusterUpgrade",
        [{"name": "conformance", "type": "conformance", "timeoutSeconds": 600}],
        name="conformance-after-upgrade",
    )
    assert StepRun.objects.get(run=run_).timeout_seconds == 600


def cancelled_run(kube: KubeEmulator, capture: Any) -> tuple[Run, StepRun, str]:
    """A run whose conformance step started, then cancelled (the cleanup task not sent)."""
    run_ = start(
        "AfterClusterUpgrade",
        [{"name": "conformance", "type": "conformance"}],
        name="conformance-after-upgrade",
    )
    name = f"hooksvc-{run_.pk}-conformance"
    assert kube.get_object("", "v1", "namespaces", None, name) is not None
    with capture(execute=False) as callbacks:
        actions.run_cancel(run_id=run_.pk, actor="alice", reason="window closed")
    assert callbacks, "the cleanup is sent after the cancel commits"
    return run_, StepRun.objects.get(run=run_), name


@pytest.mark.django_db
def test_a_cleanup_that_fails_is_recorded_without_the_error_text(
    kube: KubeEmulator, django_capture_on_commit_callbacks: Any
) -> None:
    run_, step, name = cancelled_run(kube, django_capture_on_commit_callbacks)
    kube.fail_next("DELETE", "/clusterrolebindings/", 503)
    assert cleanups.step_cleanup(step.pk) is False
    event = RunEvent.objects.get(run=run_, name="cleanup")
    assert event.message == "cleanup of cancelled step conformance failed; see hooksvc logs"
    assert kube.get_object("", "v1", "namespaces", None, name) is not None
    assert cleanups.step_cleanup(step.pk) is True  # the task may run again; it deletes then
    assert kube.get_object("", "v1", "namespaces", None, name) is None


@pytest.mark.django_db
def test_a_cleanup_that_comes_after_a_retry_leaves_the_retry_alone(
    kube: KubeEmulator, django_capture_on_commit_callbacks: Any
) -> None:
    run_, step, name = cancelled_run(kube, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=False):
        actions.run_retry(run_id=run_.pk, actor="alice", reason="window open again")
    assert cleanups.step_cleanup(step.pk) is False
    assert not RunEvent.objects.filter(run=run_, name="cleanup").exists()
    assert kube.get_object("", "v1", "namespaces", None, name) is not None


@pytest.mark.django_db
def test_a_cleanup_that_meets_an_unreachable_api_is_retried_before_a_failure_is_recorded(
    kube: KubeEmulator, django_capture_on_commit_callbacks: Any
) -> None:
    run_, step, name = cancelled_run(kube, django_capture_on_commit_callbacks)
    kube.fail_next("DELETE", "/clusterrolebindings/", 503)
    with pytest.raises(cleanups.RetryLater):
        cleanups.step_cleanup(step.pk, retries_left=2)
    assert not RunEvent.objects.filter(run=run_, name="cleanup").exists(), "nothing said yet"
    assert kube.get_object("", "v1", "namespaces", None, name) is not None
    assert cleanups.step_cleanup(step.pk, retries_left=1) is True
    assert RunEvent.objects.get(run=run_, name="cleanup").message == (
        "cleanup of cancelled step conformance ran"
    )
    assert kube.get_object("", "v1", "namespaces", None, name) is None
