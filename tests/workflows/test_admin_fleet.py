"""The fleet view, the admin's landing page: the clusters held, and by what.

A cluster is held while one of its runs holds its lifecycle (the hook's answer holds CAPI:
workflows/operators/holding.py). The tiles count clusters, not runs (a fleet of 120 clusters
said "231 running, 50 failed", most of them AfterControlPlaneInitialized runs that hold
nothing); a cluster's row names every run that holds it (a "+4 more runs" hid two failed
runs behind an approval); the runs that hold nothing are counted and listed apart.
"""

from __future__ import annotations

import datetime
import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.workflows.runs import make_run
from workflows.engine import messages
from workflows.models import Run, StepRun
from workflows.operators import access, fleet

pytestmark = pytest.mark.django_db

FLEET = "/admin/"
BACKGROUND = FLEET + "?view=background"
ACPI = "AfterControlPlaneInitialized"


def aged(run: Run, minutes: float, **fields: object) -> Run:
    """`run` as if created `minutes` ago (the fleet sorts by how long a cluster is held)."""
    created = timezone.now() - datetime.timedelta(minutes=minutes)
    Run.objects.filter(pk=run.pk).update(created_at=created, **fields)
    run.refresh_from_db()
    return run


def gate(cluster: str, minutes: float, text: str = "Upgrade window CHG-7 open?") -> Run:
    run = make_run(
        template="upgrade-gate",
        cluster=cluster,
        steps=(("backup", "noop", "succeeded"), ("approve", "approval", "waiting")),
    )
    StepRun.objects.filter(run=run, name="approve").update(params={"message": text})
    Run.objects.filter(pk=run.pk).update(
        message="workflow upgrade-gate is waiting for approval at step approve",
        context={"cluster": {"labels": {"env": "prod" if "prod" in cluster else "dev"}}},
    )
    return aged(run, minutes)


def failed(cluster: str, minutes: float, template: str = "backup-before-upgrade") -> Run:
    """A run failed at its step `backup` ("it broke"), with the message the engine writes."""
    run = make_run(template=template, cluster=cluster, moment="v1.33.0", state="failed",
                   steps=(("backup", "backup_pvs", "failed"),))  # fmt: skip
    message = messages.run_failed_at_step(run.pk, template, "backup", "it broke")
    return aged(run, minutes, message=message, finished_at=timezone.now())


def background(cluster: str, minutes: float, state: str = "running") -> Run:
    run = make_run(template="install-cni", hook=ACPI, moment="", cluster=cluster, state=state)
    return aged(run, minutes, finished_at=None if state == "running" else timezone.now())


def clusters(page: str) -> list[str]:
    return re.findall(r'<tbody class="hk-cluster" data-cluster="([^"]+)"', page)


def cluster_row(page: str, cluster: str) -> str:
    row = page[page.index(f'<tbody class="hk-cluster" data-cluster="{cluster}"') :]
    return row[: row.index("</tbody>")]


def runs_in(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr class="hk-\w+" data-run="(\d+)"', html)]


def tiles(page: str) -> dict[str, int]:
    found = re.findall(r'data-(?:state|count)="(\w+)"><strong>(\d+)</strong>', page)
    return {name: int(n) for name, n in found}


def test_the_admin_lands_on_the_fleet_says_hooksvc_and_has_no_view_site_link(
    admin_client: Client,
) -> None:
    page = admin_client.get(FLEET).content.decode()
    assert "<title>Fleet: clusters held by hooksvc | hooksvc</title>" in page
    assert 'id="site-name"><a href="/admin/">hooksvc</a>' in page
    assert "View site" not in page
    assert "Django administration" not in page
    assert "No cluster is held by hooksvc" in page


def test_a_row_per_cluster_held_longest_first_names_every_run_that_holds_it(
    admin_client: Client,
) -> None:
    gate("prod/young", 3)
    old = gate("prod/old", 12, text="Ask the DBA before upgrading")
    # Two more runs hold the same cluster, both failed: the row says so, run by run.
    notify = failed("prod/old", 5, template="notify-cmdb")
    backup = failed("prod/old", 8)
    broken = failed("dev/broken", 30)
    aged(make_run(cluster="prod/done", state="succeeded"), 50)
    page = admin_client.get(FLEET).content.decode()
    assert clusters(page) == ["dev/broken", "prod/old", "prod/young"]
    row = cluster_row(page, "prod/old")
    assert runs_in(row) == [old.pk, backup.pk, notify.pk], "every run that holds it, oldest first"
    assert "held by 3 runs" in row and "more run" not in row
    assert (
        "held 12 min" in row
        and f"since {timezone.localtime(old.created_at):%Y-%m-%d %H:%M:%S} UTC" in row
    )
    assert '<span class="hk-asks">Ask the DBA before upgrading</span>' in row
    assert row.count('data-state="failed">failed</span>') == 2
    assert f'name="run" value="{notify.pk}"' in row, "each run can be ticked on its own"
    assert reverse("admin:cluster", args=["prod", "old"]) in row
    dev = cluster_row(page, "dev/broken")
    assert runs_in(dev) == [broken.pk]
    assert "workflow backup-before-upgrade failed at step backup: it broke" in dev


def test_a_failed_row_says_why_in_a_line_without_the_retry_command(admin_client: Client) -> None:
    """The hook's message carries the whole retry command; a row offers the action instead
    (five lines of command per row at 1280 px)."""
    run = failed("dev/broken", 30)
    assert "workflows retry" in run.message
    row = cluster_row(admin_client.get(FLEET).content.decode(), "dev/broken")
    assert "workflows retry" not in row and "--reason" not in row
    assert "failed at step backup: it broke" in row


def test_tiles_count_clusters_held_and_by_what_and_the_runs_that_hold_nothing_apart(
    admin_client: Client,
) -> None:
    gate("prod/a", 5)
    gate("prod/b", 6)
    gate("dev/c", 7)
    # prod/a is also held by a failed run: it counts under both, once each.
    failed("prod/a", 4, template="notify-cmdb")
    aged(make_run(cluster="dev/e", template="other", steps=(("x", "noop", "waiting"),)), 9)
    # Hold nothing: a run of a hook CAPI does not wait for, and a released one.
    for i in range(4):
        background(f"prod/a{i}", 3)
    background("dev/f", 2, state="failed")
    aged(make_run(cluster="dev/d", state="failed"), 8, released=True, finished_at=timezone.now())
    page = admin_client.get(FLEET).content.decode()
    assert tiles(page) == {
        "held": 4,
        "awaiting_approval": 3,
        "running": 1,
        "pending": 0,
        "failed": 1,
        "cancelled": 0,
        "background": 6,
    }
    assert 'data-hook="BeforeClusterUpgrade">BeforeClusterUpgrade <strong>4</strong>' in page
    assert "4 running · 1 failed · 1 released" in page
    assert clusters(admin_client.get(FLEET + "?state=awaiting_approval").content.decode()) == [
        "dev/c",
        "prod/b",
        "prod/a",
    ]
    assert clusters(admin_client.get(FLEET + "?state=failed").content.decode()) == ["prod/a"]
    assert clusters(admin_client.get(FLEET + "?namespace=prod").content.decode()) == [
        "prod/b",
        "prod/a",
    ]
    assert clusters(admin_client.get(FLEET + "?template=other").content.decode()) == ["dev/e"]
    assert clusters(admin_client.get(FLEET + "?label=env%3Dprod").content.decode()) == [
        "prod/b",
        "prod/a",
    ]
    assert (
        clusters(admin_client.get(FLEET + "?hook=AfterControlPlaneUpgrade").content.decode()) == []
    )
    # hooksvc's own moment is a choice too.
    assert "<option>ClusterDeleted</option>" in page


def test_the_runs_that_hold_nothing_have_a_view_of_their_own_saying_why(
    admin_client: Client,
) -> None:
    held = aged(make_run(cluster="prod/held"), 5)
    told = background("prod/told", 60)
    past = timezone.now() - datetime.timedelta(minutes=1)
    proceed = aged(make_run(cluster="prod/proceeded"), 90, deadline_at=past)
    Run.objects.filter(pk=proceed.pk).update(spec={**proceed.spec, "onDeadline": "Proceed"})
    released = aged(make_run(cluster="prod/let-go"), 20, released=True)
    page = admin_client.get(FLEET).content.decode()
    assert clusters(page) == ["prod/held"] and runs_in(page) == [held.pk]
    apart = admin_client.get(BACKGROUND).content.decode()
    assert clusters(apart) == []
    assert runs_in(apart) == [released.pk, told.pk, proceed.pk], "newest first"
    rows = {pk: apart[apart.index(f'data-run="{pk}"') :].split("</tr>")[0] for pk in runs_in(apart)}
    assert f"CAPI does not wait for {ACPI}" in rows[told.pk]
    assert "proceeded past its deadline" in rows[proceed.pk]
    assert "released" in rows[released.pk]
    assert "3 runs" in apart


def test_a_malformed_filter_is_refused_with_the_form_to_use(admin_client: Client) -> None:
    response = admin_client.get(FLEET + "?label=env")
    assert response.status_code == 400
    assert "label filter &#x27;env&#x27;: write it as key=value" in response.content.decode()
    assert admin_client.get(FLEET + "?view=everything").status_code == 400


def test_a_thousand_clusters_page_by_fifty_in_two_queries_for_the_rows(
    admin_client: Client, django_assert_num_queries: object
) -> None:
    now = timezone.now()
    runs = Run.objects.bulk_create(
        Run(
            template_name="upgrade-gate",
            template_generation=1,
            spec={},
            hook="BeforeClusterUpgrade",
            cluster_key=f"uid-{i}",
            cluster_namespace=f"team-{i % 10}",
            cluster_name=f"c{i:04d}",
            moment="v1.33.0",
            state="running",
        )
        for i in range(1000)
    )
    StepRun.objects.bulk_create(
        StepRun(
            run=r,
            name="approve",
            position=0,
            type="approval",
            state="waiting",
            waits_for_person=True,
        )
        for r in runs
    )
    # created_at is auto_now_add: spread the fleet over the last 1000 minutes.
    for i, run in enumerate(runs):
        run.created_at = now - datetime.timedelta(minutes=1000 - i)
    Run.objects.bulk_update(runs, ["created_at"])
    # The session, the user, the counts, the filter menus, the bypasses in force, the gates
    # waiting for canaries (rollouts; more only while one waits), and TWO queries for the
    # rows: the page of clusters, then the runs that hold them.
    with django_assert_num_queries(8):  # type: ignore[operator]
        page = admin_client.get(FLEET + "?page=2").content.decode()
    assert clusters(page)[:2] == ["team-0/c0050", "team-1/c0051"] and len(clusters(page)) == 50
    assert "1000 clusters · page 2 of 20" in page


def test_runs_apart_stay_a_day_after_they_end_but_a_failed_run_holds_however_old() -> None:
    now = timezone.now()
    old = make_run(cluster="a/old", state="failed")
    Run.objects.filter(pk=old.pk).update(
        released=True, finished_at=now - datetime.timedelta(days=2)
    )
    recent = make_run(cluster="a/recent", state="failed")
    Run.objects.filter(pk=recent.pk).update(
        released=True, finished_at=now - datetime.timedelta(hours=1)
    )
    make_run(cluster="a/ok", state="succeeded")
    holding = make_run(cluster="a/stuck", state="failed")
    Run.objects.filter(pk=holding.pk).update(finished_at=now - datetime.timedelta(days=9))
    everyone = access.unrestricted("test")
    apart = fleet.background_page(
        fleet.FleetFilter(view="background"), actor=everyone, now=now, offset=0, limit=9
    )
    assert [r.cluster_name for r in apart] == ["recent"]
    held = fleet.held_clusters(fleet.FleetFilter(), actor=everyone, now=now, offset=0, limit=9)
    assert [c.name for c in held] == ["stuck"]


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        (
            messages.run_failed_at_step(7, "notify", "call", "HTTP 503: busy"),
            "workflow notify failed at step call: HTTP 503: busy",
        ),
        (messages.run_cancelled(7, "notify"), "workflow notify was cancelled by an operator"),
        (
            messages.waiting_for_failed_workflow("addons", "cni", 7, "failed"),
            "workflow addons is waiting for workflow cni (run 7), which failed",
        ),
        (
            messages.run_holding_past_deadline(
                "notify", messages.run_failed_at_step(7, "notify", "call", "HTTP 503")
            ),
            "workflow notify passed its deadline; holding: workflow notify failed at step call: "
            "HTTP 503",
        ),
        ("workflow notify is running step call", "workflow notify is running step call"),
    ],
)
def test_a_rows_why_is_the_message_without_its_suggested_commands(message: str, shown: str) -> None:
    """Every message that carries a hint (workflows/engine/messages.py), as a row shows it."""
    assert messages.without_hints(message) == shown
