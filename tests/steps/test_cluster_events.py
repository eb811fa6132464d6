"""Events on the CAPI Cluster for a run's start, success and failure, and when it starts
waiting for a person (with the command that approves it, which runs as printed).

The engine asks for an Event after each transition commits. In a worker's engine task the
task emits them itself once its work is done; elsewhere (and for what the API server did not
take) the `workflows.cluster_event` task does (messages observed here through
`dispatch.broker`, our own seam, not the Kubernetes client). Events land in the management
cluster (the emulator); the task retries while it is unreachable, and both skip quietly when
no management cluster is configured.
"""

from __future__ import annotations

import collections
import logging
import re
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
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
from workflows.models import Run, WorkflowTemplate
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


@pytest.fixture
def messages_sent(
    monkeypatch: pytest.MonkeyPatch, no_worker: None
) -> list[tuple[str, tuple[Any, ...]]]:
    """Messages the engine sends, recorded instead of sent; a fresh pause of direct Events.
    No worker runs: one an earlier test left would advance the committed run too."""
    sent: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(dispatch, "broker", lambda name, args, countdown: sent.append((name, args)))
    monkeypatch.setattr(events, "_paused_until", 0.0)
    return sent


def a_new_run(name: str = CLUSTER, uid: str = CLUSTER_UID) -> Run:
    """A run of one `noop` step, as a hook call creates it (pending)."""
    template = WorkflowTemplate.objects.filter(name="one-noop").first() or wf.template(
        "one-noop", steps=[{"name": "only", "type": "noop"}]
    )
    cluster = capi.cluster_v1beta2(name=name, namespace=NS, uid=uid)
    [run] = hook_runs.runs_ensure(templates=[template], call=wf.call(cluster=cluster))
    return run


@pytest.mark.django_db(transaction=True)
def test_an_engine_task_emits_its_runs_events_itself_without_a_message(
    kube: KubeEmulator, messages_sent: list[tuple[str, tuple[Any, ...]]]
) -> None:
    """Real commits (a transactional test): each Event is collected as its transition
    commits and emitted when the task is done, in order."""
    run = a_new_run()
    tasks.advance.apply(args=(run.pk,))
    assert [e[0] for e in cluster_events(kube)] == [
        "HooksvcWorkflowStarted",
        "HooksvcWorkflowSucceeded",
    ]
    assert [name for name, _ in messages_sent] == [dispatch.ADVANCE], "the hook's message only"


@pytest.mark.django_db(transaction=True)
def test_an_engine_task_calls_the_api_server_with_no_transaction_open(
    kube: KubeEmulator,
    messages_sent: list[tuple[str, tuple[Any, ...]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As a step's own I/O (ARCHITECTURE invariant 8): an Event is collected when its
    transition commits and emitted after the engine's work, never inside its transaction,
    so a slow API server holds no row lock."""
    in_transaction: list[bool] = []
    emit = events.emit

    def observed(*args: Any) -> None:
        in_transaction.append(connection.in_atomic_block)
        emit(*args)

    monkeypatch.setattr(events, "emit", observed)
    run = a_new_run()
    tasks.advance.apply(args=(run.pk,))
    assert in_transaction == [False, False]
    assert len(cluster_events(kube)) == 2


@pytest.mark.django_db(transaction=True)
def test_events_the_api_server_does_not_take_go_to_the_retrying_task_and_others_follow_for_a_while(
    kube: KubeEmulator,
    messages_sent: list[tuple[str, tuple[Any, ...]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unreachable API server costs an engine task one connection attempt, then no more:
    for PAUSE_SECONDS every engine task hands its Events to `workflows.cluster_event`
    (retried there) without trying; after it, tasks emit them again."""
    monkeypatch.setattr(events, "PAUSE_SECONDS", 1.0)
    k8s.management_api()
    kube.stop()
    first = a_new_run()
    tasks.advance.apply(args=(first.pk,))
    to_task = [args for name, args in messages_sent if name == dispatch.CLUSTER_EVENT]
    assert to_task == [(first.pk, "started"), (first.pk, "succeeded")]

    kube.start()
    kube.requests.clear()
    messages_sent.clear()
    second = a_new_run("second", "uid-second")
    tasks.advance.apply(args=(second.pk,))
    assert kube.requests == collections.deque(), "paused: the task did not try"
    to_task = [args for name, args in messages_sent if name == dispatch.CLUSTER_EVENT]
    assert to_task == [(second.pk, "started"), (second.pk, "succeeded")]

    time.sleep(1.1)
    messages_sent.clear()
    third = a_new_run("third", "uid-third")
    tasks.advance.apply(args=(third.pk,))
    assert [name for name, _ in messages_sent if name == dispatch.CLUSTER_EVENT] == []
    assert ("POST", f"/api/v1/namespaces/{NS}/events") in kube.requests


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
