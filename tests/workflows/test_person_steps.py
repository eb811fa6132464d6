"""Step types that wait for a person say so themselves; the engine names no step type.

`sign_off` (tests/workflows/steps_for_tests.py, loaded through HOOKSVC_STEP_MODULES) is a
custom type registered with `waits_for_person` and its own `waiting_message`: its run says
what it waits for, shows as waiting for approval, answers approvalRetryAfterSeconds,
announces itself on the Cluster with the command that approves it, and is approved with
the same operator action as `approval` (through the memo keys both sides name once).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import capi
from tests.support import workflows as wf
from workflows.engine import dispatch, messages, scheduling
from workflows.hookpath import answers
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, StepRun
from workflows.operators import actions, states
from workflows.steps import memo, registry

pytestmark = pytest.mark.django_db

ASKS = "Has finance signed off the upgrade of prod/c1?"


@pytest.fixture
def cluster_events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The Cluster Events the engine asks for (after commit), recorded instead of sent."""
    found: list[tuple[Any, ...]] = []

    def broker(name: str, args: tuple[Any, ...], countdown: float | None) -> None:
        if name == dispatch.CLUSTER_EVENT:
            found.append(args)

    monkeypatch.setattr(dispatch, "broker", broker)
    return found


def _start(capture: Any, step_type: str = "sign_off", **fields: Any) -> Run:
    template = wf.template(
        "finance",
        steps=[{"name": "sign", "type": step_type, "with": {"message": ASKS}}],
        **fields,
    )
    call = wf.call(cluster=capi.cluster_v1beta2(name="c1", namespace="prod", uid="uid-c1"))
    with capture(execute=True):
        [run] = hook_runs.runs_ensure(templates=[template], call=call)
        scheduling.advance(run.pk)
    run.refresh_from_db()
    return run


def test_the_registry_says_which_types_wait_for_a_person() -> None:
    assert {"approval", "sign_off"} <= registry.person_types()
    assert not registry.waits_for_person("wait")
    assert registry.waiting_message("sign_off") == "waiting for sign-off"
    noop = registry.get("noop")
    assert noop.asks({"message": "ignored"}) == "", "only a person is asked"


def test_a_custom_type_that_waits_for_a_person_holds_like_an_approval(
    django_capture_on_commit_callbacks: Any, cluster_events: list[tuple[Any, ...]]
) -> None:
    run = _start(
        django_capture_on_commit_callbacks, retryAfterSeconds=30, approvalRetryAfterSeconds=7
    )
    assert run.message == "workflow finance is waiting for sign-off at step sign"
    assert states.of(run) == states.State.AWAITING_APPROVAL
    call = wf.call(cluster=capi.cluster_v1beta2(name="c1", namespace="prod", uid="uid-c1"))
    answer = answers.answer(call, handler_name="h")
    assert (answer.message, answer.retry_after) == (run.message, 7)
    command = messages.approve_command(run.pk, "sign")
    assert cluster_events == [
        (run.pk, "started"),
        (
            run.pk,
            dispatch.AWAITING_APPROVAL,
            "workflow finance is waiting for sign-off at step sign for BeforeClusterUpgrade "
            f'v1.33.0: "{ASKS}"; approve it with `{command}`',
        ),
    ]

    with django_capture_on_commit_callbacks(execute=True):
        actions.step_approve(run_id=run.pk, step_name="sign", actor="alice", reason="signed")
        step = run.steps.get()
        assert (step.memo[memo.APPROVED_BY], step.memo[memo.APPROVAL_REASON]) == (
            "alice",
            "signed",
        )
        scheduling.run_step(step.pk)
    run.refresh_from_db()
    assert run.state == Run.State.SUCCEEDED
    assert run.steps.get().output == {"signedOffBy": "alice"}
    assert [e[1] for e in cluster_events].count(dispatch.AWAITING_APPROVAL) == 1


def test_a_step_that_waits_for_nobody_cannot_be_approved(
    django_capture_on_commit_callbacks: Any, cluster_events: list[tuple[Any, ...]]
) -> None:
    template = wf.template(
        "plain", steps=[{"name": "pause", "type": "wait", "with": {"seconds": 60}}]
    )
    call = wf.call(cluster=capi.cluster_v1beta2(name="c1", namespace="prod", uid="uid-c1"))
    with django_capture_on_commit_callbacks(execute=True):
        [run] = hook_runs.runs_ensure(templates=[template], call=call)
        scheduling.advance(run.pk)
    run.refresh_from_db()
    assert run.steps.get().state == StepRun.State.WAITING
    assert run.message == "workflow plain is running step pause", "a wait names no person"
    assert states.of(run) == states.State.RUNNING
    with pytest.raises(actions.ActionError, match="'pause' is a wait step, not an approval"):
        actions.step_approve(run_id=run.pk, step_name="pause", actor="alice", reason="go")
    assert [e[1] for e in cluster_events] == ["started"], "no Event asks anyone to approve"
