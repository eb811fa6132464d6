""" "Held for" has one definition, and every page shows it alike (workflows/operators/holding.py).

A run failed under `onFailure: Block` still holds its hook: its run page said "held for 0s"
(until it failed) while the fleet said minutes (until now). The run page, the cluster page,
the fleet and `workflows why` now show the same span from the same moment, with the absolute
time beside it; a released run's span ends at its release, as the hook's answer does. Which
runs hold is checked against the hook's own answer in tests/workflows/test_fleet_metrics.py.
"""

from __future__ import annotations

import datetime
import io

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.workflows.runs import make_run
from workflows.models import Run
from workflows.operators import actions

pytestmark = pytest.mark.django_db


def test_a_failed_run_is_held_for_the_same_span_since_the_same_moment_everywhere(
    admin_client: Client,
) -> None:
    run = make_run(cluster="prod/c1", state="failed", steps=(("backup", "backup_pvs", "failed"),))
    created = timezone.now() - datetime.timedelta(minutes=47, seconds=10)
    # It failed a minute after it started: the span runs on, to now.
    Run.objects.filter(pk=run.pk).update(
        created_at=created, finished_at=created + datetime.timedelta(minutes=1)
    )
    since = f"since {timezone.localtime(created):%Y-%m-%d %H:%M:%S} UTC"
    run_page = admin_client.get(reverse("admin:workflows_run_change", args=[run.pk])).content
    assert f'id="run-held">47 min <span class="hk-quiet">{since}</span>' in run_page.decode()
    cluster = admin_client.get(reverse("admin:cluster", args=["prod", "c1"])).content.decode()
    assert f'<td class="hk-held">47 min<div class="hk-quiet">{since}</div></td>' in cluster
    fleet = admin_client.get("/admin/").content.decode()
    assert f'title="{since}">47 min</td>' in fleet
    assert f'held 47 min</div><div class="hk-quiet">{since}</div>' in fleet
    out = io.StringIO()
    call_command("workflows", "why", "prod/c1", stdout=out)
    assert f"run {run.pk} (backup-before-upgrade): failed, held for 47 min, {since}" in (
        out.getvalue()
    )


def test_a_released_runs_span_ends_at_its_release(admin_client: Client) -> None:
    run = make_run(cluster="prod/c1", state="failed")
    created = timezone.now() - datetime.timedelta(minutes=30)
    Run.objects.filter(pk=run.pk).update(created_at=created)
    actions.run_release(run_id=run.pk, actor="ops:ann", reason="CAB-9: go on")
    released = run.events.get(name="release").at
    page = admin_client.get(reverse("admin:workflows_run_change", args=[run.pk])).content.decode()
    held = page.split('id="run-held">')[1].split("</dd>")[0]
    assert held == (
        f'30 min <span class="hk-quiet">from {timezone.localtime(created):%Y-%m-%d %H:%M:%S} '
        f"UTC until released at {timezone.localtime(released):%Y-%m-%d %H:%M:%S} UTC</span>"
    )


def test_the_api_gives_how_long_a_run_held_in_seconds_and_since_when(
    admin_client: Client,
) -> None:
    """`heldFor` is words for people; programs get `heldSince` and `heldSeconds`."""
    run = make_run(cluster="prod/c1", state="failed", steps=(("backup", "backup_pvs", "failed"),))
    created = timezone.now() - datetime.timedelta(minutes=47, seconds=10)
    Run.objects.filter(pk=run.pk).update(created_at=created)
    since = created.isoformat(timespec="seconds")
    [held] = admin_client.get("/api/v1/fleet/").json()["results"][0]["runs"]
    assert held["heldSince"] == since
    assert 47 * 60 + 10 <= held["heldSeconds"] < 47 * 60 + 10 + 600
    assert held["heldFor"].startswith("47 min, since ")
    why = admin_client.get("/api/v1/clusters/prod/c1/why/").json()
    [found] = [r for g in why["groups"] for r in g["runs"] if r["run"]["id"] == run.pk]
    assert found["heldSince"] == since
    assert 47 * 60 + 10 <= found["heldSeconds"] < 47 * 60 + 10 + 600
