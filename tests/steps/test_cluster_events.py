"""Events on the CAPI Cluster for a run's start, success and failure, and when it starts
waiting for a person (with the command that approves it, which runs as printed).

The engine enqueues `workflows.cluster_event` after each transition commits (observed here by
replacing the task's `delay`, our own seam, not the Kubernetes client); the task records the
Event in the management cluster (the emulator), retries while it is unreachable, and skips
quietly when no management cluster is configured.
"""

from __future__ import annotations

import logging
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from tests.steps.conftest import CLUSTER, CLUSTER_UID, NS
from tests.support import capi
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator
from tests.workflows.runs import make_run
from workflows import tasks
from workflows.engine import dispatch, messages, scheduling
from workflows.hookpath import runs as hook_runs
from workflows.kube import events, k8s
from workflows.models import Run
from workflows.steps import memo

pytestmark = pytest.mark.django_db


def a_run(**fields: Any) -> Run:
    run = make_run(cluster=f"{NS}/{CLUSTER}", **fields)
    run.context = {"cluster": {"uid": CLUSTER_UID}}
    run.save()
    return run


def cluster_events(kube: KubeEmulator) -> list[tuple[str, str, str, str]]:
    return sorted(
        (e["reason"], e["message"], e["type"], e["involvedObject"]["uid"])
        for e in kube.list_objects("", "v1", "events", NS)
        if e["involvedObject"]["kind"] == "Cluster" and e["involvedObject"]["name"] == CLUSTER
    )


def test_a_run_start_success_and_failure_become_events_on_the_cluster(kube: KubeEmulator) -> None:
    run = a_run(steps=(("snapshot", "backup_pvs", "failed"),))
    for outcome in ("started", "succeeded", "failed"):
        events.emit(run.pk, outcome)
    prefix = "workflow backup-before-upgrade"
    assert cluster_events(kube) == [
        (
            "HooksvcWorkflowFailed",
            f"{prefix} failed for BeforeClusterUpgrade v1.33.0 at step snapshot",
            "Warning",
            CLUSTER_UID,
        ),
        (
            "HooksvcWorkflowStarted",
            f"{prefix} started for BeforeClusterUpgrade v1.33.0",
            "Normal",
            CLUSTER_UID,
        ),
        (
            "HooksvcWorkflowSucceeded",
            f"{prefix} succeeded for BeforeClusterUpgrade v1.33.0",
            "Normal",
            CLUSTER_UID,
        ),
    ]


def test_without_a_management_cluster_events_are_skipped_and_that_is_logged_once(
    kube: KubeEmulator,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = a_run()
    monkeypatch.setattr(events, "_skipped_logged", False)
    caplog.set_level(logging.INFO, logger="workflows.kube.events")
    with override_settings(KUBECONFIG_PATH=tmp_path / "none"):
        events.emit(run.pk, "started")
        events.emit(run.pk, "succeeded")
    assert [r.getMessage() for r in caplog.records] == [
        "no management cluster configured; Cluster events are not emitted"
    ]
    assert cluster_events(kube) == []


def test_the_task_retries_an_unreachable_api_server_then_drops_the_event(
    kube: KubeEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    run = a_run()
    k8s.management_api()
    kube.fail_next("POST", "/events$", 503, times=2)
    tasks.cluster_event.apply(args=(run.pk, "started"))
    assert [e[0] for e in cluster_events(kube)] == ["HooksvcWorkflowStarted"]
    kube.stop()
    caplog.set_level(logging.WARNING, logger="workflows.tasks")
    result = tasks.cluster_event.apply(args=(run.pk, "succeeded"))
    assert result.successful()
    dropped = [r.getMessage() for r in caplog.records if r.name == "workflows.tasks"]
    assert dropped == ["cluster event dropped"]


def test_the_engine_announces_start_and_outcome_after_commit(
    monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    sent: list[tuple[Any, ...]] = []

    def broker(name: str, args: tuple[Any, ...], countdown: float | None) -> None:
        if name == dispatch.CLUSTER_EVENT:
            sent.append(args)

    monkeypatch.setattr(dispatch, "broker", broker)
    template = wf.template("backup-before-upgrade", steps=[{"name": "only", "type": "noop"}])
    cluster = capi.cluster_v1beta2(name=CLUSTER, namespace=NS, uid=CLUSTER_UID)
    with django_capture_on_commit_callbacks(execute=True):
        [run] = hook_runs.runs_ensure(templates=[template], call=wf.call(cluster=cluster))
    assert sent == [], "the hook path never emits events"
    with django_capture_on_commit_callbacks(execute=True):
        scheduling.advance(run.pk)
    assert sent == [(run.pk, "started"), (run.pk, "succeeded")]


def test_a_run_that_starts_waiting_for_a_person_says_so_with_the_command_that_approves_it(
    kube: KubeEmulator,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The Event carries the approval's own text and a command that runs as printed.

    Kubernetes checks an events.k8s.io note against NoteLengthLimit (1024 bytes,
    kubernetes/kubernetes pkg/apis/core/validation/events.go); the text is kept under it.
    """

    def broker(name: str, args: tuple[Any, ...], countdown: float | None) -> None:
        if name == dispatch.CLUSTER_EVENT:
            tasks.cluster_event.apply(args=args)

    monkeypatch.setattr(dispatch, "broker", broker)
    asks = "Is the change window for prod open?"
    template = wf.template(
        "approve-prod", steps=[{"name": "approve", "type": "approval", "with": {"message": asks}}]
    )
    cluster = capi.cluster_v1beta2(name=CLUSTER, namespace=NS, uid=CLUSTER_UID)
    with django_capture_on_commit_callbacks(execute=True):
        [run] = hook_runs.runs_ensure(templates=[template], call=wf.call(cluster=cluster))
        scheduling.advance(run.pk)
    awaiting = [e for e in cluster_events(kube) if e[0] == "HooksvcAwaitingApproval"]
    command = messages.approve_command(run.pk, "approve")
    assert command.endswith(f'manage.py workflows approve {run.pk} --step approve --reason "<why>"')
    text = (
        "workflow approve-prod is waiting for approval at step approve for "
        f'BeforeClusterUpgrade v1.33.0: "{asks}"; approve it with `{command}`'
    )
    assert awaiting == [("HooksvcAwaitingApproval", text, "Normal", CLUSTER_UID)]

    printed = re.search(r"`[^`]*manage\.py ([^`]+)`", awaiting[0][1])
    assert printed is not None
    call_command(*shlex.split(printed.group(1).replace("<why>", "window open")))
    step = run.steps.get()
    assert step.memo[memo.APPROVAL_REASON] == "window open"
    assert step.memo[memo.APPROVED_BY].startswith("cli:")


def test_a_long_approval_text_is_cut_to_fit_an_event() -> None:
    text = messages.run_awaiting_person(
        7, "w", "waiting for approval", "s", moment="BeforeClusterDelete", asks="x" * 5000
    )
    assert len(text.encode()) < 1024
    assert f'..."; approve it with `{messages.approve_command(7, "s")}`' in text
