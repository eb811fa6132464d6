"""`manage.py workflows`: list and show (table and -o json), and each operator action.

Actions go through workflows.operators.actions: each test checks the state it leaves and the
RunEvent that records who did it and why; an action that does not apply exits 1.
"""

from __future__ import annotations

import getpass
import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests.workflows.runs import make_run
from workflows.models import Run, RunEvent, StepRun

pytestmark = pytest.mark.django_db

S = StepRun.State


def cli(*args: str) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out)
    return out.getvalue()


def cli_json(*args: str) -> Any:
    return json.loads(cli(*args, "-o", "json"))


def action_event(run: Run, name: str) -> RunEvent:
    return RunEvent.objects.get(run=run, kind=RunEvent.Kind.ACTION, name=name)


def test_list_shows_runs_newest_first_as_json() -> None:
    older = make_run(template="a", cluster="prod/c1")
    newer = make_run(template="b", cluster="prod/c2", state=Run.State.FAILED)
    runs = cli_json("list")
    assert [r["id"] for r in runs] == [newer.pk, older.pk]
    assert runs[0] == {
        "id": newer.pk,
        "template": "b",
        "templateGeneration": 1,
        "hook": "BeforeClusterUpgrade",
        "cluster": {"namespace": "prod", "name": "c2", "key": "uid-prod-c2"},
        "moment": "v1.33.0",
        "machine": None,
        "state": "failed",
        "displayState": "failed",
        "released": False,
        "deadlineExceeded": False,
        "message": "workflow b is running",
        "currentStep": None,
        "why": "workflow b is running",
        "createdAt": newer.created_at.isoformat(timespec="seconds"),
        "startedAt": None,
        "finishedAt": None,
        "deadlineAt": None,
    }


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (("--state", "failed"), ["b"]),
        (("--hook", "BeforeClusterDelete"), ["c"]),
        (("--cluster", "prod/c1"), ["a", "c"]),
        (("--template", "a"), ["a"]),
        (("--state", "running", "--cluster", "prod/c1"), ["c", "a"]),
    ],
)
def test_list_filters_combine(filters: tuple[str, ...], expected: list[str]) -> None:
    make_run(template="a", cluster="prod/c1")
    make_run(template="b", cluster="prod/c2", state=Run.State.FAILED)
    make_run(template="c", cluster="prod/c1", hook="BeforeClusterDelete", moment="")
    assert sorted(r["template"] for r in cli_json("list", *filters)) == sorted(expected)


def test_list_prints_a_table_by_default() -> None:
    run = make_run(template="a")
    lines = cli("list").splitlines()
    assert lines[0].split() == ["ID", "STATE", "TEMPLATE", "CLUSTER", "STEP", "WHY", "AGE"]
    assert lines[1].split()[:5] == [str(run.pk), "running", "a", "prod/c1", "-"]


def test_list_rejects_a_cluster_without_namespace() -> None:
    with pytest.raises(CommandError, match="--cluster must be NAMESPACE/NAME"):
        cli("list", "--cluster", "c1")


def test_show_gives_the_run_its_steps_and_events_as_json() -> None:
    run = make_run(steps=(("snapshot", "noop", S.SUCCEEDED), ("approve", "approval", S.WAITING)))
    StepRun.objects.filter(run=run, name="snapshot").update(output={"size": 3})
    cli("release", str(run.pk), "--reason", "change window", "--actor", "ops:ann")
    shown = cli_json("show", str(run.pk))
    assert set(shown) == {
        *cli_json("list")[0],
        "context",
        "steps",
        "events",
    }
    assert shown["released"] is True
    assert [s["name"] for s in shown["steps"]] == ["snapshot", "approve"]
    assert shown["steps"][0] == {
        "name": "snapshot",
        "type": "noop",
        "state": "succeeded",
        "dependsOn": [],
        "with": {},
        "failures": 0,
        "retries": 3,
        "timeoutSeconds": None,
        "startedAt": None,
        "finishedAt": None,
        "dueAt": None,
        "message": "",
        "output": {"size": 3},
    }
    assert shown["steps"][1]["dependsOn"] == ["snapshot"]
    [event] = shown["events"]
    assert {k: event[k] for k in ("kind", "name", "step", "actor", "reason")} == {
        "kind": "action",
        "name": "release",
        "step": "",
        "actor": "ops:ann",
        "reason": "change window",
    }


def test_show_prints_fields_steps_and_events() -> None:
    run = make_run(steps=(("snapshot", "noop", S.FAILED),))
    text = cli("show", str(run.pk))
    assert f"run:       {run.pk}" in text
    assert "template:  backup-before-upgrade (generation 1)" in text
    assert "snapshot  noop  failed  1/3" in text
    assert "it broke" in text


def test_show_of_a_missing_run_is_an_error() -> None:
    with pytest.raises(CommandError, match="run 999999 does not exist"):
        cli("show", "999999")


def test_retry_puts_failed_steps_back_and_records_who_and_why() -> None:
    run = make_run(
        state=Run.State.FAILED,
        steps=(("snapshot", "noop", S.FAILED), ("approve", "approval", S.PENDING)),
    )
    out = cli("retry", str(run.pk), "--reason", "storage is back", "--actor", "ops:ann")
    assert out.strip() == f"run {run.pk}: retry recorded (run is running)"
    run.refresh_from_db()
    assert run.state == Run.State.RUNNING
    snapshot = run.steps.get(name="snapshot")
    assert (snapshot.state, snapshot.failures, snapshot.memo) == (S.PENDING, 0, {"generation": 1})
    event = action_event(run, "retry")
    assert (event.actor, event.reason, event.step_name) == ("ops:ann", "storage is back", "")


def test_retry_of_one_step_names_it_in_the_event() -> None:
    run = make_run(state=Run.State.FAILED, steps=(("snapshot", "noop", S.FAILED),))
    cli("retry", str(run.pk), "--step", "snapshot", "--reason", "again")
    assert action_event(run, "retry").step_name == "snapshot"


def test_retry_of_a_step_that_did_not_fail_exits_with_the_actions_message() -> None:
    run = make_run(steps=(("snapshot", "noop", S.SUCCEEDED),))
    with pytest.raises(CommandError) as caught:
        cli("retry", str(run.pk), "--step", "snapshot", "--reason", "again")
    assert str(caught.value) == (
        f"run {run.pk}: step 'snapshot' is in state succeeded; only a failed or cancelled step "
        "can be retried"
    )
    assert caught.value.returncode == 1
    assert not RunEvent.objects.filter(run=run).exists()


def test_retry_of_a_run_with_nothing_failed_says_so_in_a_sentence() -> None:
    run = make_run(steps=(("backup", "noop", S.SUCCEEDED), ("approve", "approval", S.WAITING)))
    # Idempotent (issue 27): a run going on is where a retry would put it; exit 0.
    printed = cli("retry", str(run.pk), "--reason", "again")
    assert printed.strip() == (
        f"run {run.pk} has no failed or cancelled step to retry: the run is running, its steps "
        "are backup succeeded, approve waiting: nothing changed"
    )
    assert not RunEvent.objects.filter(run=run).exists()


def test_cancel_stops_the_run_and_defaults_the_actor_to_the_os_user() -> None:
    run = make_run(steps=(("snapshot", "wait", S.WAITING), ("approve", "approval", S.PENDING)))
    cli("cancel", str(run.pk), "--reason", "wrong cluster")
    run.refresh_from_db()
    assert run.state == Run.State.CANCELLED
    assert set(run.steps.values_list("state", flat=True)) == {S.CANCELLED}
    event = action_event(run, "cancel")
    assert (event.actor, event.reason) == (f"cli:{getpass.getuser()}", "wrong cluster")


def test_cancel_of_a_finished_run_is_an_error() -> None:
    run = make_run(state=Run.State.SUCCEEDED)
    with pytest.raises(CommandError, match=f"run {run.pk} is already succeeded"):
        cli("cancel", str(run.pk), "--reason", "late")


def test_approve_records_the_approver_on_the_step() -> None:
    run = make_run(steps=(("approve", "approval", S.WAITING),))
    cli("approve", str(run.pk), "--step", "approve", "--reason", "CAB-123", "--actor", "ops:bo")
    step = run.steps.get(name="approve")
    assert (step.memo["approved_by"], step.memo["reason"]) == ("ops:bo", "CAB-123")
    event = action_event(run, "approve")
    assert (event.actor, event.reason, event.step_name) == ("ops:bo", "CAB-123", "approve")


def test_approve_of_a_step_that_is_no_approval_is_an_error() -> None:
    run = make_run(steps=(("snapshot", "noop", S.READY),))
    with pytest.raises(CommandError, match="step 'snapshot' is a noop step, not an approval"):
        cli("approve", str(run.pk), "--step", "snapshot", "--reason", "ok")


def test_approve_needs_a_step() -> None:
    run = make_run(steps=(("approve", "approval", S.WAITING),))
    with pytest.raises(CommandError, match="--step"):
        cli("approve", str(run.pk), "--reason", "ok")


def test_skip_lets_a_failed_run_go_on() -> None:
    run = make_run(
        state=Run.State.FAILED,
        steps=(("snapshot", "noop", S.FAILED), ("approve", "approval", S.PENDING)),
    )
    cli("skip", str(run.pk), "--step", "snapshot", "--reason", "done by hand", "--actor", "ops:cy")
    run.refresh_from_db()
    assert run.state == Run.State.RUNNING
    assert run.steps.get(name="snapshot").state == S.SKIPPED
    event = action_event(run, "skip")
    assert (event.actor, event.reason, event.step_name) == ("ops:cy", "done by hand", "snapshot")


def test_skip_of_an_unknown_step_lists_the_steps() -> None:
    run = make_run(steps=(("snapshot", "noop", S.FAILED),))
    with pytest.raises(CommandError, match=r"has no step 'snapshto' \(steps: snapshot\)"):
        cli("skip", str(run.pk), "--step", "snapshto", "--reason", "typo")


def test_release_lets_the_lifecycle_proceed_once() -> None:
    run = make_run(state=Run.State.FAILED)
    cli("release", str(run.pk), "--reason", "accept the risk", "--actor", "ops:di")
    run.refresh_from_db()
    assert (run.released, run.state) == (True, Run.State.FAILED)
    event = action_event(run, "release")
    assert (event.actor, event.reason) == ("ops:di", "accept the risk")
    # Idempotent: says so, exits 0, records nothing more.
    again = cli("release", str(run.pk), "--reason", "again")
    assert f"run {run.pk} is already released: nothing changed" in again
    assert RunEvent.objects.filter(run=run, kind="action", name="release").count() == 1


@pytest.mark.parametrize("action", ["retry", "cancel", "release"])
def test_every_action_requires_a_reason(action: str) -> None:
    run = make_run()
    with pytest.raises(CommandError, match="--reason"):
        cli(action, str(run.pk))


def test_a_blank_reason_is_refused() -> None:
    run = make_run()
    with pytest.raises(CommandError, match="an action needs a reason"):
        cli("cancel", str(run.pk), "--reason", " ")


def test_a_reason_too_long_to_record_is_refused() -> None:
    """The API's form bounds the reason (500 characters, as the run's history keeps it);
    the CLI has no form, so the action itself refuses it, before anything is written."""
    run = make_run()
    with pytest.raises(CommandError, match="reason: at most 500 characters"):
        cli("cancel", str(run.pk), "--reason", "x" * 501)
    assert not RunEvent.objects.filter(run=run, kind="action").exists()


def test_an_action_on_a_missing_run_is_an_error() -> None:
    with pytest.raises(CommandError, match="run 999999 does not exist"):
        cli("cancel", "999999", "--reason", "x")
