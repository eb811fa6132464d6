"""The fleet view, the admin's landing page: one row per cluster held, held longest first."""

from __future__ import annotations

import datetime
import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.workflows.runs import make_run
from workflows.models import Run, StepRun
from workflows.operators import access, selectors

pytestmark = pytest.mark.django_db

FLEET = "/admin/"


def aged(run: Run, minutes: float, **fields: object) -> Run:
    """`run` as if created `minutes` ago (the fleet sorts by how long a run has held)."""
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


def rows(page: str) -> list[str]:
    return re.findall(r'<tr class="hk-row" data-cluster="([^"]+)"', page)


def test_the_admin_lands_on_the_fleet_says_hooksvc_and_has_no_view_site_link(
    admin_client: Client,
) -> None:
    page = admin_client.get(FLEET).content.decode()
    assert "<title>Fleet: clusters held by hooksvc | hooksvc</title>" in page
    assert 'id="site-name"><a href="/admin/">hooksvc</a>' in page
    assert "View site" not in page
    assert "Django administration" not in page
    assert "No cluster is held by hooksvc" in page


def test_one_row_per_cluster_held_longest_first_with_step_why_and_blocked_for(
    admin_client: Client,
) -> None:
    gate("prod/young", 3)
    gate("prod/old", 12, text="Ask the DBA before upgrading")
    failed = aged(make_run(cluster="dev/broken", steps=(("backup", "backup_pvs", "failed"),)), 30)
    Run.objects.filter(pk=failed.pk).update(
        state="failed", message="workflow backup-before-upgrade failed at step backup"
    )
    # A second run holding the same cluster: still one row, which says so.
    aged(make_run(template="notify", cluster="prod/old", moment="v1.34.0"), 1)
    aged(make_run(cluster="prod/done", state="succeeded"), 50)
    page = admin_client.get(FLEET).content.decode()
    assert rows(page) == ["dev/broken", "prod/old", "prod/young"]
    old = page[page.index('data-cluster="prod/old"') :]
    old = old[: old.index("</tr>")]
    assert "waiting for approval" in old and "approve (approval)" in old
    assert '<span class="hk-asks">Ask the DBA before upgrading</span>' in old
    assert "12 min" in old and "+1 more run" in old
    assert reverse("admin:cluster", args=["prod", "old"]) in old
    broken = page[page.index('data-cluster="dev/broken"') :]
    assert "failed at step backup" in broken[: broken.index("</tr>")]
    assert "it broke" in broken[: broken.index("</tr>")]  # the step's own last error


def test_counts_on_top_and_filters_by_state_namespace_hook_template_and_label(
    admin_client: Client,
) -> None:
    gate("prod/a", 5)
    gate("prod/b", 6)
    gate("dev/c", 7)
    released = aged(
        make_run(cluster="dev/d", state="failed"), 8, released=True, finished_at=timezone.now()
    )
    aged(make_run(cluster="dev/e", template="other", steps=(("x", "noop", "waiting"),)), 9)
    page = admin_client.get(FLEET).content.decode()
    counts = dict(re.findall(r'data-state="(\w+)"><strong>(\d+)</strong>', page))
    assert counts == {
        "awaiting_approval": "3",
        "running": "1",
        "failed": "0",
        "released": "1",
        "pending": "0",
        "cancelled": "0",
    }
    assert rows(admin_client.get(FLEET + "?state=awaiting_approval").content.decode()) == [
        "dev/c",
        "prod/b",
        "prod/a",
    ]
    shown = admin_client.get(FLEET + "?state=released").content.decode()
    assert rows(shown) == ["dev/d"] and 'data-state="released">released<' in shown
    assert released.state == "failed"
    assert rows(admin_client.get(FLEET + "?namespace=prod").content.decode()) == [
        "prod/b",
        "prod/a",
    ]
    assert rows(admin_client.get(FLEET + "?template=other").content.decode()) == ["dev/e"]
    assert rows(admin_client.get(FLEET + "?label=env%3Dprod").content.decode()) == [
        "prod/b",
        "prod/a",
    ]
    assert rows(admin_client.get(FLEET + "?hook=AfterControlPlaneUpgrade").content.decode()) == []
    # hooksvc's own moment is a choice too.
    assert "<option>ClusterDeleted</option>" in page


def test_a_malformed_label_filter_is_refused_with_the_form_to_use(admin_client: Client) -> None:
    response = admin_client.get(FLEET + "?label=env")
    assert response.status_code == 400
    assert "label filter &#x27;env&#x27;: write it as key=value" in response.content.decode()


def test_a_thousand_clusters_page_by_fifty_in_one_query_for_the_rows(
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
    # The session, the user, the counts, the filter menus, the break glass in force, and ONE
    # query for the rows.
    with django_assert_num_queries(6) as queries:  # type: ignore[operator]
        page = admin_client.get(FLEET + "?page=2").content.decode()
    assert rows(page)[:2] == ["team-0/c0050", "team-1/c0051"] and len(rows(page)) == 50
    assert "1000 clusters · page 2 of 20" in page
    reading_rows = [q["sql"] for q in queries.captured_queries if "ROW_NUMBER" in q["sql"]]
    assert len(reading_rows) == 1


def test_the_fleet_shows_recently_failed_but_not_old_or_succeeded_runs() -> None:
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
    everyone = access.unrestricted("test")
    shown = selectors.fleet_page(
        selectors.FleetFilter(), actor=everyone, now=now, offset=0, limit=10
    )
    assert [r.cluster_name for r in shown] == ["recent"]


def test_only_runs_whose_answer_holds_capi_show_a_blocked_time_and_come_first(
    admin_client: Client,
) -> None:
    """A run of a hook CAPI does not wait for (AfterControlPlaneInitialized), or one past a
    `Proceed` deadline, is listed but blocks nothing: no "blocked for", after the held ones.
    The same rule as the hook's answer and the blocked-seconds metric
    (workflows/operators/holding.py)."""
    aged(make_run(cluster="prod/held"), 5)
    aged(make_run(cluster="prod/told", hook="AfterControlPlaneInitialized", moment=""), 60)
    past = timezone.now() - datetime.timedelta(minutes=1)
    proceed = aged(make_run(cluster="prod/proceeded"), 90, deadline_at=past)
    Run.objects.filter(pk=proceed.pk).update(spec={**proceed.spec, "onDeadline": "Proceed"})
    page = admin_client.get(FLEET).content.decode()
    assert rows(page) == ["prod/held", "prod/proceeded", "prod/told"]

    def blocked_cell(cluster: str) -> str:
        row = page[page.index(f'data-cluster="{cluster}"') :]
        return row[: row.index("</tr>")]

    assert "5 min" in blocked_cell("prod/held")
    assert "1 h 00 min" not in blocked_cell("prod/told")
    assert "1 h 30 min" not in blocked_cell("prod/proceeded")
