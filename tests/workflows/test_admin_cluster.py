"""A cluster's page: its runs across its life as a timeline, with durations."""

from __future__ import annotations

import datetime

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.workflows.runs import make_run
from workflows.models import Run, StepRun

pytestmark = pytest.mark.django_db


def test_a_clusters_runs_from_create_to_delete_with_their_durations(admin_client: Client) -> None:
    start = timezone.now() - datetime.timedelta(hours=3)
    life = [
        ("AfterControlPlaneInitialized", "", 0, 125),
        ("BeforeClusterUpgrade", "v1.32.0->v1.33.0", 60, 754),
        ("BeforeClusterDelete", "", 170, None),
    ]
    for hook, moment, offset, seconds in life:
        run = make_run(
            template=f"on-{hook.lower()}",
            hook=hook,
            cluster="prod/c1",
            moment=moment,
            state="succeeded" if seconds else "running",
            steps=(("work", "noop", "succeeded" if seconds else "waiting"),),
        )
        created = start + datetime.timedelta(minutes=offset)
        finished = created + datetime.timedelta(seconds=seconds) if seconds else None
        Run.objects.filter(pk=run.pk).update(
            created_at=created, started_at=created, finished_at=finished
        )
        StepRun.objects.filter(run=run).update(started_at=created, finished_at=finished)
    make_run(cluster="prod/other")
    page = admin_client.get(reverse("admin:cluster", args=["prod", "c1"])).content.decode()
    rows = page.split('<tr data-run="')[1:]
    assert [r.split("<a ")[1].split(">")[1].split("<")[0] for r in rows] == [
        "AfterControlPlaneInitialized",
        "BeforeClusterUpgrade",
        "BeforeClusterDelete",
    ]
    assert "2m 05s" in rows[0] and "12m 34s" in rows[1]
    assert "v1.32.0 \N{RIGHTWARDS ARROW} v1.33.0" in rows[1]
    assert 'data-state="running">running<' in rows[2]
    assert "prod/other" not in page


def test_an_unknown_cluster_is_not_found(admin_client: Client) -> None:
    assert admin_client.get(reverse("admin:cluster", args=["prod", "nope"])).status_code == 404
