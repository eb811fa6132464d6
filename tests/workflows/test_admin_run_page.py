"""A run's page leads with its steps, collapses repeated hook calls, and refreshes while active."""

from __future__ import annotations

import datetime
import hashlib
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.workflows.runs import make_run
from workflows.models import HookCall, Run, StepRun

pytestmark = pytest.mark.django_db

HTMX = Path(__file__).parents[2] / "workflows/static/workflows/vendor/htmx-2.0.11.min.js"
#: htmx.org 2.0.11's dist/htmx.min.js as `npm pack htmx.org@2.0.11` gives it.
HTMX_SHA256 = "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717"


def at(hour: int, minute: int, second: int) -> datetime.datetime:
    return datetime.datetime(2025, 6, 1, hour, minute, second, tzinfo=datetime.UTC)


def run_with_history() -> Run:
    run = make_run(
        template="upgrade",
        cluster="prod/c1",
        steps=(
            ("backup", "backup_pvs", "succeeded"),
            ("notify", "http", "ready"),
            ("approve", "approval", "pending"),
        ),
    )
    Run.objects.filter(pk=run.pk).update(created_at=at(10, 0, 0), started_at=at(10, 0, 1))
    StepRun.objects.filter(run=run, name="backup").update(
        started_at=at(10, 0, 1), finished_at=at(10, 2, 6)
    )
    StepRun.objects.filter(run=run, name="notify").update(
        started_at=at(10, 2, 6),
        failures=2,
        message="POST https://hooks.example/notify: 503 Service Unavailable",
        due_at=timezone.now() + datetime.timedelta(seconds=90),
    )
    StepRun.objects.filter(run=run, name="approve").update(
        params={"message": "Check the change calendar, then approve"}
    )
    return run


def page_of(client: Client, run: Run) -> str:
    return client.get(reverse("admin:workflows_run_change", args=[run.pk])).content.decode()


def test_the_page_leads_with_the_steps_and_keeps_spec_and_context_collapsed_below(
    admin_client: Client,
) -> None:
    page = page_of(admin_client, run_with_history())
    steps, calls, history = (page.index(f'id="{x}"') for x in ("steps", "hook-calls", "history"))
    spec = page.index('<details class="hk-details" id="run-spec">')
    assert steps < calls < history < spec
    assert "<details open" not in page


def test_each_step_shows_start_duration_attempts_last_error_and_next_retry(
    admin_client: Client,
) -> None:
    run = run_with_history()
    page = page_of(admin_client, run)
    backup = page[page.index('data-step="backup"') :].split("</tr>")[0]
    assert "2025-06-01 10:00:01" in backup and "2m 05s" in backup and "1 of 4" in backup
    notify = page[page.index('data-step="notify"') :].split("</tr>")[0]
    assert "2 of 4" in notify
    assert '<div class="hk-error">POST https://hooks.example/notify: 503' in notify
    due = timezone.localtime(StepRun.objects.get(run=run, name="notify").due_at)
    assert f"retry at {due:%H:%M:%S} UTC (in 1 min)" in notify
    approve = page[page.index('data-step="approve"') :].split("</tr>")[0]
    assert '<div class="hk-asks">Check the change calendar, then approve</div>' in approve
    assert reverse("admin:workflows_run_step_action", args=[run.pk, "approve", "approve"]) in (
        approve
    )


def test_steps_a_person_or_a_timer_ends_count_no_attempts_until_one_fails(
    admin_client: Client,
) -> None:
    """An approval and a wait make no attempts worth counting ("Attempts 1 of 4" read as a
    retry budget they do not have); an I/O step shows its count from the first attempt."""
    run = make_run(
        steps=(
            ("settle", "wait", "waiting"),
            ("approve", "approval", "waiting"),
            ("call", "http", "waiting"),
            ("pause", "wait", "ready"),
        )
    )
    StepRun.objects.filter(run=run, name="pause").update(failures=1, message="boom")
    page = page_of(admin_client, run)

    def attempts(step: str) -> str:
        row = page[page.index(f'data-step="{step}"') :].split("</tr>")[0]
        return row.split('<td class="hk-nowrap">')[4].split("</td>")[0]

    assert [attempts(s) for s in ("settle", "approve", "call", "pause")] == [
        "-",
        "-",
        "1 of 4",
        "1 of 4",
    ]


def test_a_failed_run_still_holds_and_its_page_says_for_how_long_since_when(
    admin_client: Client,
) -> None:
    """Under onFailure: Block a failed run keeps holding its hook: "held for" runs on until
    now, not until it failed (the page said "0s" while the fleet said minutes)."""
    run = make_run(state="failed", steps=(("backup", "backup_pvs", "failed"),))
    created = timezone.now() - datetime.timedelta(minutes=47)
    Run.objects.filter(pk=run.pk).update(created_at=created, finished_at=created)
    held = page_of(admin_client, run).split('id="run-held">')[1].split("</dd>")[0]
    assert held == (
        f'47 min <span class="hk-quiet">since {timezone.localtime(created):%Y-%m-%d %H:%M:%S} '
        "UTC</span>"
    )


def test_the_approval_text_and_the_error_retried_are_on_the_confirm_pages(
    admin_client: Client,
) -> None:
    run = run_with_history()
    approve = admin_client.get(
        reverse("admin:workflows_run_step_action", args=[run.pk, "approve", "approve"])
    ).content.decode()
    assert '<span class="hk-asks">Check the change calendar, then approve</span>' in approve
    StepRun.objects.filter(run=run, name="notify").update(state="failed")
    Run.objects.filter(pk=run.pk).update(state="failed")
    retry = admin_client.get(
        reverse("admin:workflows_run_action", args=[run.pk, "retry"])
    ).content.decode()
    assert "The error being retried" in retry
    assert "POST https://hooks.example/notify: 503 Service Unavailable" in retry


def test_repeated_hook_calls_collapse_into_one_line_with_their_count_and_span(
    admin_client: Client,
) -> None:
    run = run_with_history()
    start = timezone.now() - datetime.timedelta(minutes=10)
    calls = [
        HookCall(
            hook=run.hook,
            handler="before-upgrade",
            cluster_key=run.cluster_key,
            cluster_namespace="prod",
            cluster_name="c1",
            moment=run.moment,
            status="Success",
            retry_after=5,
            message="workflow upgrade is waiting for approval at step approve",
            latency_ms=1.5,
        )
        for _ in range(50)
    ]
    HookCall.objects.bulk_create(calls)
    for i, call in enumerate(HookCall.objects.order_by("id")):
        HookCall.objects.filter(pk=call.pk).update(at=start + datetime.timedelta(seconds=5 * i))
    latest = HookCall.objects.create(
        hook=run.hook,
        handler="before-upgrade",
        cluster_key=run.cluster_key,
        cluster_namespace="prod",
        cluster_name="c1",
        moment=run.moment,
        status="Success",
        retry_after=0,
        message="",
        latency_ms=1.0,
    )
    page = page_of(admin_client, run)
    section = page[page.index('id="hook-calls"') : page.index('id="history"')]
    assert section.count("<tr>") == 3  # the header, the last answer, the fifty repeats
    assert "\N{MULTIPLICATION SIGN} 50 over 4 min" in section
    assert timezone.localtime(latest.at).strftime("%Y-%m-%d %H:%M:%S") in section


def test_an_active_run_refreshes_its_live_part_and_a_finished_one_stops(
    admin_client: Client,
) -> None:
    run = run_with_history()
    live = reverse("admin:workflows_run_live", args=[run.pk])
    page = page_of(admin_client, run)
    assert f'hx-get="{live}" hx-trigger="every 3s" hx-swap="outerHTML"' in page
    assert '<script src="/static/workflows/vendor/htmx-2.0.11.min.js" defer>' in page
    fragment = admin_client.get(live).content.decode()
    assert "<html" not in fragment
    assert 'id="run-live"' in fragment and 'data-step="notify"' in fragment
    Run.objects.filter(pk=run.pk).update(state="succeeded", finished_at=timezone.now())
    assert "hx-trigger" not in admin_client.get(live).content.decode()
    assert "hx-trigger" not in page_of(admin_client, run)


def test_htmx_is_the_pinned_file_served_here_and_no_page_loads_a_script_from_elsewhere(
    admin_client: Client,
) -> None:
    assert hashlib.sha256(HTMX.read_bytes()).hexdigest() == HTMX_SHA256
    assert (HTMX.parent / "htmx-LICENSE.txt").read_text().startswith("Zero-Clause BSD")
    page = page_of(admin_client, run_with_history())
    assert 'src="http' not in page and 'src="//' not in page


def test_a_released_failed_run_shows_released_not_failed(admin_client: Client) -> None:
    run = make_run(cluster="prod/c2", state="failed", steps=(("a", "noop", "failed"),))
    Run.objects.filter(pk=run.pk).update(released=True)
    page = page_of(admin_client, run)
    assert (
        '<span class="hooksvc-badge" id="run-state" data-state="released">released</span>' in page
    )
