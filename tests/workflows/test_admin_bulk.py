"""Bulk actions from the fleet: a selection or a filter, one reason, recorded per run."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.workflows.runs import make_run
from workflows.models import Run, RunEvent, StepRun
from workflows.operators import actions, bulk

pytestmark = pytest.mark.django_db

BULK = "/admin/fleet/bulk/"


def waiting(cluster: str) -> Run:
    run = make_run(
        template="upgrade-gate", cluster=cluster, steps=(("approve", "approval", "waiting"),)
    )
    StepRun.objects.filter(run=run).update(params={"message": "CAB approved?"})
    return run


def test_approving_a_selection_confirms_the_list_then_records_each_run(
    admin_client: Client, sent: list[object]
) -> None:
    runs = [waiting(f"prod/c{i}") for i in range(3)]
    chosen = {"action": "approve", "scope": "selected", "run": [r.pk for r in runs[:2]]}
    confirm = admin_client.post(BULK, chosen).content.decode()
    assert "Approve: 2 runs" in confirm and 'name="reason"' in confirm
    assert "prod/c0" in confirm and "prod/c1" in confirm and "prod/c2" not in confirm
    assert '<span class="hk-asks">CAB approved?</span>' in confirm
    assert not RunEvent.objects.exists()  # nothing happens before the confirmation

    refused = admin_client.post(BULK, {**chosen, "confirmed": "1", "reason": ""})
    assert "This field is required" in refused.content.decode()
    assert not RunEvent.objects.exists()

    done = admin_client.post(BULK, {**chosen, "confirmed": "1", "reason": "CAB-99"})
    assert "Approve: 2 of 2 done" in done.content.decode()
    events = RunEvent.objects.filter(kind="action").order_by("run_id")
    assert [(e.run_id, e.name, e.step_name, e.actor, e.reason) for e in events] == [
        (runs[0].pk, "approve", "approve", "admin:admin", "CAB-99"),
        (runs[1].pk, "approve", "approve", "admin:admin", "CAB-99"),
    ]


def test_a_filter_acts_on_every_run_it_finds_that_the_action_applies_to(
    admin_client: Client, sent: list[object]
) -> None:
    for i in range(3):
        waiting(f"prod/p{i}")
    waiting("dev/d0")
    make_run(cluster="prod/busy", steps=(("x", "noop", "waiting"),))  # not waiting for approval
    chosen = {"action": "approve", "scope": "filter", "namespace": "prod"}
    confirm = admin_client.post(BULK, chosen).content.decode()
    assert "Approve: 3 runs" in confirm
    assert "dev/d0" not in confirm and "prod/busy" not in confirm
    # What was confirmed is the list shown, sent back as ids.
    ids = [int(x) for x in re.findall(r'name="run" value="(\d+)"', confirm)]
    admin_client.post(
        BULK, {"action": "approve", "run": ids, "confirmed": "1", "reason": "window open"}
    )
    approved = StepRun.objects.filter(memo__approved_by="admin:admin")
    assert sorted(s.run.cluster_name for s in approved) == ["p0", "p1", "p2"]


def test_the_confirmation_warns_of_each_cluster_other_runs_still_hold(
    admin_client: Client, sent: list[object]
) -> None:
    """Approving a cluster's gate does not release it while two failed runs hold it too: the
    confirmation names them (an operator bulk-approved such a cluster unwarned)."""
    gated = waiting("prod/held")
    first = make_run(template="notify-cmdb", cluster="prod/held", state="failed")
    second = make_run(template="backup", cluster="prod/held", moment="v1.34.0", state="cancelled")
    alone = waiting("prod/alone")
    # A run that holds nothing (CAPI does not wait for its hook) is not a warning.
    make_run(template="cni", cluster="prod/alone", hook="AfterControlPlaneInitialized", moment="")
    chosen = {"action": "approve", "scope": "selected", "run": [gated.pk, alone.pk]}
    confirm = admin_client.post(BULK, chosen).content.decode()
    warning = confirm[confirm.index('id="still-held"') : confirm.index('id="bulk-confirm"')]
    assert "1 cluster will stay held after this" in warning
    held = warning[warning.index('data-cluster="prod/held"') :].split("</li>")[0]
    assert f"run {first.pk}</a> (notify-cmdb, BeforeClusterUpgrade v1.33.0" in held
    assert 'data-state="failed">failed</span>' in held
    assert f"run {second.pk}</a> (backup, BeforeClusterUpgrade v1.34.0" in held
    assert 'data-state="cancelled">cancelled</span>' in held
    assert "prod/alone" not in warning
    # Acting on every run that holds it: nothing left to warn of.
    every = {"action": "cancel", "scope": "selected", "run": [gated.pk, first.pk, second.pk]}
    confirm = admin_client.post(BULK, every).content.decode()
    assert 'id="still-held"' not in confirm
    assert "A cancelled run still holds its cluster" in confirm


def test_a_partial_failure_is_reported_per_run_and_does_not_undo_the_others(
    admin_client: Client, sent: list[object]
) -> None:
    ok = waiting("prod/ok")
    finished = make_run(cluster="prod/finished", state="succeeded")
    other = waiting("prod/other")
    ids = [ok.pk, finished.pk, other.pk]
    page = admin_client.post(
        BULK,
        {"action": "cancel", "run": ids, "confirmed": "1", "reason": "bad window"},
    ).content.decode()
    assert "Cancel: 2 of 3 done" in page and "1 refused" in page
    assert f"run {finished.pk} is already succeeded" in page
    states = dict(Run.objects.filter(pk__in=ids).values_list("pk", "state"))
    assert states == {ok.pk: "cancelled", finished.pk: "succeeded", other.pk: "cancelled"}
    assert RunEvent.objects.filter(kind="action", name="cancel").count() == 2


def test_bulk_retry_and_release_call_the_single_actions(sent: list[object]) -> None:
    failed = make_run(cluster="prod/f", state="failed", steps=(("a", "noop", "failed"),))
    outcomes = bulk.perform("retry", [failed.pk], actor="admin:x", reason="flake")
    assert outcomes == [bulk.Outcome(failed.pk, "prod/f", True, "retrying its failed steps")]
    assert Run.objects.get(pk=failed.pk).state == "running"
    outcomes = bulk.perform("release", [failed.pk, failed.pk], actor="admin:x", reason="go")
    assert [o.ok for o in outcomes] == [True]  # each run once
    assert Run.objects.get(pk=failed.pk).released
    approve = bulk.perform("approve", [failed.pk], actor="admin:x", reason="go")
    assert approve == [
        bulk.Outcome(failed.pk, "prod/f", False, f"run {failed.pk} is not waiting for approval")
    ]


def test_bulk_refuses_without_a_reason_or_with_an_unknown_action() -> None:
    with pytest.raises(actions.ActionError, match="needs the operator's name and a reason"):
        bulk.perform("cancel", [1], actor="admin:x", reason=" ")
    with pytest.raises(ValueError, match="unknown bulk action 'delete'"):
        bulk.perform("delete", [1], actor="admin:x", reason="r")


def test_staff_without_the_operate_permission_cannot_act_in_bulk(client: Client) -> None:
    client.force_login(User.objects.create_user("viewer", password="v-" * 8, is_staff=True))
    run = waiting("prod/c")
    response = client.post(
        BULK, {"action": "cancel", "run": [run.pk], "confirmed": "1", "reason": "no"}
    )
    assert response.status_code == 302 and response["Location"] == reverse("admin:index")
    assert Run.objects.get(pk=run.pk).state == "running"
    assert 'name="run"' not in client.get("/admin/").content.decode()
