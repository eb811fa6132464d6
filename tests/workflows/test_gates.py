"""Canary waves: a `gate` step through the hook path and the engine, the clock held.

The canaries' AfterClusterUpgrade runs and the wave's BeforeClusterUpgrade run start from
hook calls (workflows.hookpath.answers) and move by the engine's own functions called
here (scheduling.advance, run_step); a fleet driven over HTTPS with a real worker is
tests/workflows/test_worker_gates.py's.
"""

from __future__ import annotations

import datetime
import io
import json
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from hooksvc.contract import catalog
from tests.support import capi
from tests.support import workflows as wf
from tests.workflows import rollouts as two_wave
from workflows.engine import scheduling
from workflows.hookpath import answers
from workflows.models import Run, RunEvent, StepRun
from workflows.operators import access, rollouts
from workflows.rollout_actions import RolloutAction
from workflows.steps import registry

pytestmark = pytest.mark.django_db(transaction=True)

VERSION = "v1.33.0"
#: The main wave's gate: two canaries, soaked ten minutes.
GATE = {"matchLabels": {"ring": "canary"}, "count": 2, "soakSeconds": 600}


def _cluster(name: str, **labels: str) -> dict[str, Any]:
    return capi.cluster_v1beta2(name=name, uid=f"uid-{name}", labels=labels)


def _call(hook: str, name: str, **labels: str) -> answers.Answer:
    return answers.answer(wf.call(hook, cluster=_cluster(name, **labels)), handler_name="test")


def _advance_all() -> None:
    for run in Run.objects.filter(state__in=Run.ACTIVE):
        scheduling.advance(run.pk)


def _fleet(checks: str = "noop") -> None:
    """Canary checks at AfterClusterUpgrade, and the main wave gated on the canaries."""
    two_wave.templates(checks=checks, gate=GATE, retry_after=3600)


def _canary_passes(name: str, **labels: str) -> None:
    _call("AfterClusterUpgrade", name, ring="canary", **labels)
    _advance_all()


def test_the_wave_waits_for_two_canaries_and_their_soak(
    sent: list[Any], now: list[datetime.datetime]
) -> None:
    _fleet()
    _call("BeforeClusterUpgrade", "main-1", ring="main")
    _advance_all()
    answer = _call("BeforeClusterUpgrade", "main-1", ring="main")
    assert answer.message == (
        "workflow wave-main waits for 2 canaries ring=canary to pass AfterClusterUpgrade "
        "at v1.33.0 and soak 600 s at step canaries"
    )
    _canary_passes("canary-1")
    _canary_passes("canary-2")
    gate = StepRun.objects.get(type="gate")
    now[0] += datetime.timedelta(seconds=30)
    scheduling.run_step(gate.pk)
    gate.refresh_from_db()
    assert gate.state == StepRun.State.WAITING, "two canaries passed, not soaked yet"
    assert gate.due_at is not None
    now[0] = gate.due_at
    scheduling.run_step(gate.pk)
    now[0] += datetime.timedelta(seconds=600)
    scheduling.run_step(gate.pk)
    assert Run.objects.get(template_name="wave-main").state == Run.State.SUCCEEDED
    assert _call("BeforeClusterUpgrade", "main-1", ring="main") == answers.PROCEED


def test_once_its_canaries_passed_the_gate_names_when_its_soak_ends(
    sent: list[Any], now: list[datetime.datetime]
) -> None:
    """As the window step names its opening: the end of the soak, a moment fixed once the
    canaries passed (deterministic, invariant 6), rounded up to the minute, in UTC."""
    _fleet()
    _call("BeforeClusterUpgrade", "main-1", ring="main")
    _advance_all()
    _canary_passes("canary-1")
    _canary_passes("canary-2")
    finished = max(
        r.finished_at for r in Run.objects.filter(template_name="canary-checks") if r.finished_at
    )
    ends = finished + datetime.timedelta(seconds=600)
    if ends.second or ends.microsecond:
        ends = ends.replace(second=0, microsecond=0) + datetime.timedelta(minutes=1)
    gate = StepRun.objects.get(type="gate")
    now[0] += datetime.timedelta(seconds=30)
    scheduling.run_step(gate.pk)
    expected = (
        "workflow wave-main waits for 2 canaries ring=canary to pass AfterClusterUpgrade at "
        f"v1.33.0 and soak until {ends.astimezone(datetime.UTC):%a %Y-%m-%d %H:%M} UTC "
        "at step canaries"
    )
    assert _call("BeforeClusterUpgrade", "main-1", ring="main").message == expected
    now[0] += datetime.timedelta(seconds=60)
    scheduling.run_step(gate.pk)
    assert _call("BeforeClusterUpgrade", "main-1", ring="main").message == expected, (
        "the same while it soaks"
    )


def test_a_failed_canary_halts_the_wave_until_an_operator_resumes(
    sent: list[Any], now: list[datetime.datetime]
) -> None:
    _fleet(checks="flaky")
    _call("BeforeClusterUpgrade", "main-1", ring="main")
    _advance_all()
    _canary_passes("canary-1")
    _canary_passes("canary-2")
    _canary_passes("canary-3", health="bad")
    failed = Run.objects.get(template_name="canary-health")
    assert failed.state == Run.State.FAILED
    gate = StepRun.objects.get(type="gate")
    now[0] += datetime.timedelta(seconds=3600)
    scheduling.run_step(gate.pk)
    answer = _call("BeforeClusterUpgrade", "main-1", ring="main")
    assert answer.status == catalog.Status.SUCCESS and answer.retry_after > 0
    assert answer.message.startswith(
        "workflow wave-main halts the rollout to v1.33.0: canary fleet/canary-3 failed "
        f"workflow canary-health (run {failed.pk}); resume it with `"
    ), answer.message
    [shown] = rollouts.overview(access.unrestricted("test"))
    assert shown.halt.startswith("halts the rollout to v1.33.0: canary fleet/canary-3")
    assert [m.cluster for m in shown.waves[0].clusters] == ["fleet/main-1"]
    listed = io.StringIO()
    call_command("workflows", "rollout", "list", stdout=listed)
    assert listed.getvalue().startswith("v1.33.0: halts the rollout to v1.33.0: canary fleet/")
    assert "wave-main" in listed.getvalue() and "fleet/main-1" in listed.getvalue()

    call_command(
        "workflows", "rollout", "resume", VERSION, "--reason", "canary-3's disk, not 1.33",
        "--actor", "ops:ann",
    )  # fmt: skip
    action = RolloutAction.objects.get()
    assert (action.kind, action.runs, action.actor) == ("resume", [failed.pk], "ops:ann")
    event = RunEvent.objects.get(name="rollout_resume")
    assert (event.run.template_name, event.step_name, event.actor, event.reason) == (
        "wave-main",
        "canaries",
        "ops:ann",
        "canary-3's disk, not 1.33",
    ), "the held run's history records who resumed it and why"
    scheduling.run_step(gate.pk)  # the resume made it due now (its message recorded in `sent`)
    assert Run.objects.get(template_name="wave-main").state == Run.State.SUCCEEDED


def test_an_abandoned_rollout_fails_the_waiting_runs(
    sent: list[Any], now: list[datetime.datetime]
) -> None:
    _fleet(checks="flaky")
    _call("BeforeClusterUpgrade", "main-1", ring="main")
    _advance_all()
    _canary_passes("canary-3", health="bad")
    rollouts.rollout_abandon(version=VERSION, actor="ops:bob", reason="1.33 breaks our CNI")
    scheduling.run_step(StepRun.objects.get(type="gate").pk)
    run = Run.objects.get(template_name="wave-main")
    assert run.state == Run.State.FAILED
    assert "the rollout to v1.33.0 was abandoned by ops:bob: 1.33 breaks our CNI" in run.message
    with pytest.raises(rollouts.RolloutError, match="abandoned already"):
        rollouts.rollout_abandon(version=VERSION, actor="ops:bob", reason="again")


def test_an_abandoned_rollout_names_the_ways_on_that_work_and_stays_listed(
    sent: list[Any], now: list[datetime.datetime], admin_client: Client
) -> None:
    """A retry of an abandoned gate fails again (an abandon is final for its version): the
    answer names setting the version back and releasing the run instead, and so does
    `workflows why`; the rollout stays listed as abandoned while its runs hold their
    clusters, and the action records the runs it failed."""
    _fleet(checks="flaky")
    _call("BeforeClusterUpgrade", "main-1", ring="main")
    _advance_all()
    _canary_passes("canary-3", health="bad")
    run = Run.objects.get(template_name="wave-main")
    rollouts.rollout_abandon(version=VERSION, actor="ops:bob", reason="1.33 breaks our CNI")
    assert RolloutAction.objects.get().runs == [run.pk]
    scheduling.run_step(StepRun.objects.get(type="gate").pk)
    answer = _call("BeforeClusterUpgrade", "main-1", ring="main")
    assert answer.message == (
        "workflow wave-main failed at step canaries: the rollout to v1.33.0 was abandoned by "
        "ops:bob: 1.33 breaks our CNI; set the Cluster's version back (a new target version "
        "is a new moment), or let it upgrade anyway with "
        f'`{settings.MANAGE_PY} workflows release {run.pk} --reason "<why>"`'
    )
    why = io.StringIO()
    call_command("workflows", "why", "fleet/main-1", "-o", "json", stdout=why)
    with pytest.raises(CommandError, match="a retry of step 'canaries' fails again: the rollo"):
        call_command(
            "workflows", "retry", str(run.pk), "--step", "canaries", "--reason", "again",
            "--actor", "ops:bob",
        )  # fmt: skip
    assert Run.objects.get(pk=run.pk).state == Run.State.FAILED, "no retry recorded"
    [group] = json.loads(why.getvalue())["groups"]
    commands = [w["command"] for w in group["runs"][0]["waysOut"]]
    assert not [c for c in commands if "workflows retry" in c], commands
    assert any(f"workflows release {run.pk}" in c for c in commands), commands

    [shown] = rollouts.overview(access.unrestricted("test"))
    assert (shown.state, shown.abandoned) == (
        "abandoned",
        "abandoned by ops:bob: 1.33 breaks our CNI",
    )
    assert [(m.cluster, m.state) for m in shown.waves[0].clusters] == [("fleet/main-1", "failed")]
    listed = io.StringIO()
    call_command("workflows", "rollout", "list", stdout=listed)
    assert listed.getvalue().startswith("v1.33.0: abandoned by ops:bob: 1.33 breaks our CNI")
    assert "fleet/main-1" in listed.getvalue()
    listed_json = io.StringIO()
    call_command("workflows", "rollout", "list", "-o", "json", stdout=listed_json)
    assert json.loads(listed_json.getvalue())[0]["state"] == "abandoned"

    page = admin_client.get(reverse("admin:workflows_rolloutaction_changelist"))
    assert reverse("admin:workflows_run_change", args=[run.pk]) in page.content.decode()

    call_command(
        "workflows", "release", str(run.pk), "--reason", "upgrade main-1 anyway",
        "--actor", "ops:bob",
    )  # fmt: skip
    assert _call("BeforeClusterUpgrade", "main-1", ring="main") == answers.PROCEED
    assert rollouts.overview(access.unrestricted("test")) == [], "released: it holds nothing"


def test_resuming_a_rollout_nothing_halts_is_refused(sent: list[Any]) -> None:
    with pytest.raises(
        rollouts.RolloutError, match=r"no failed canary halts the rollout to v9\.0\.0"
    ):
        rollouts.rollout_resume(version="v9.0.0", actor="ops:ann", reason="why not")


def test_a_rollout_reason_too_long_to_record_is_refused_before_anything_is_read(
    sent: list[Any],
) -> None:
    """The CLI has no form bounding the reason, as the API has: the service refuses it with
    a clear error, not the database's, and before it looks for failed canaries (v9 has none,
    which would be the error otherwise)."""
    with pytest.raises(CommandError, match="reason: at most 200 characters"):
        call_command(
            "workflows", "rollout", "resume", "v9", "--reason", "x" * 201, "--actor", "ops:ann"
        )
    with pytest.raises(rollouts.RolloutError, match="reason: at most 200 characters"):
        rollouts.rollout_abandon(version=VERSION, actor="ops:bob", reason="y" * 201)
    assert not RolloutAction.objects.exists()


@pytest.mark.parametrize(
    ("given", "hook", "error"),
    [
        ({"count": 2, "all": True}, "BeforeClusterUpgrade", "count: give either count or all"),
        ({}, "BeforeClusterUpgrade", "count: give either count or all"),
        ({"count": 0}, "BeforeClusterUpgrade", "count: must be at least 1"),
        ({"count": 1}, "AfterClusterUpgrade", "a gate holds BeforeClusterUpgrade only"),
        ({"count": 1, "matchLabels": {}}, "BeforeClusterUpgrade", "matchLabels: needs"),
    ],
)
def test_an_invalid_gate_is_refused(given: dict[str, Any], hook: str, error: str) -> None:
    params = {"matchLabels": {"ring": "canary"}, **given}
    with pytest.raises(registry.ParamError, match=error):
        registry.validate("gate", params, hook=hook)
