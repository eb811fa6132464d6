"""The admin: run list with progress, a run's timeline, and actions behind a confirmation page."""

from __future__ import annotations

import datetime

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.support import capi
from tests.support import workflows as wf
from workflows.hookpath import answers
from workflows.models import HookCall, Run, RunEvent, StepRun
from workflows.operators import bypasses
from workflows.steps import registry

pytestmark = pytest.mark.django_db


def make_run(
    name: str = "c1",
    *,
    state: str = "running",
    steps: tuple[tuple[str, str, str], ...] = (
        ("approve", "approval", "waiting"),
        ("after", "noop", "pending"),
    ),
) -> Run:
    run = Run.objects.create(
        template_name="gate",
        template_generation=1,
        spec=wf.spec(),
        hook="BeforeClusterUpgrade",
        cluster_key=f"uid-{name}",
        cluster_namespace="fleet",
        cluster_name=name,
        moment="v1.33.0",
        state=state,
        message="workflow gate is waiting for approval at step approve",
    )
    for i, (step_name, step_type, step_state) in enumerate(steps):
        StepRun.objects.create(
            run=run,
            name=step_name,
            position=i,
            type=step_type,
            state=step_state,
            waits_for_person=registry.waits_for_person(step_type),
        )
    return run


def test_the_run_list_shows_cluster_state_and_progress(admin_client: Client) -> None:
    make_run(
        steps=(("a", "noop", "succeeded"), ("b", "approval", "waiting"), ("c", "noop", "pending"))
    )
    page = admin_client.get(reverse("admin:workflows_run_changelist")).content.decode()
    assert "fleet/c1" in page
    assert "waiting for approval" in page
    assert "1 of 3 steps" in page
    assert "v1.33.0" in page


def test_the_run_list_costs_the_same_queries_for_a_thousand_runs(
    admin_client: Client, django_assert_max_num_queries: object
) -> None:
    runs = Run.objects.bulk_create(
        Run(
            template_name="gate",
            template_generation=1,
            spec={},
            hook="BeforeClusterUpgrade",
            cluster_key=f"u{i}",
            cluster_namespace="fleet",
            cluster_name=f"c{i}",
            moment="v1.33.0",
        )
        for i in range(1000)
    )
    StepRun.objects.bulk_create(StepRun(run=r, name="s", position=0, type="noop") for r in runs)
    with django_assert_max_num_queries(8):  # type: ignore[operator]
        response = admin_client.get(
            reverse("admin:workflows_run_changelist") + "?state=pending&hook=BeforeClusterUpgrade"
        )
    assert response.status_code == 200
    assert "0 of 1 step<" in response.content.decode()


def test_approving_from_the_admin_asks_for_a_reason_and_records_who(admin_client: Client) -> None:
    run = make_run()
    url = reverse("admin:workflows_run_step_action", args=[run.pk, "approve", "approve"])
    confirm = admin_client.get(url).content.decode()
    assert "Approve step approve" in confirm and 'name="reason"' in confirm
    assert admin_client.post(url, {"reason": ""}).status_code == 200  # a reason is required
    assert not RunEvent.objects.exists()
    response = admin_client.post(url, {"reason": "CAB-1234"})
    assert response.status_code == 302
    event = RunEvent.objects.get(kind="action")
    assert (event.name, event.actor, event.reason, event.step_name) == (
        "approve",
        "admin:admin",
        "CAB-1234",
        "approve",
    )
    assert StepRun.objects.get(name="approve").memo["approved_by"] == "admin:admin"


def test_cancel_and_release_from_the_admin(admin_client: Client) -> None:
    run = make_run()
    admin_client.post(
        reverse("admin:workflows_run_action", args=[run.pk, "cancel"]), {"reason": "bad window"}
    )
    admin_client.post(
        reverse("admin:workflows_run_action", args=[run.pk, "release"]), {"reason": "proceed"}
    )
    run.refresh_from_db()
    assert (run.state, run.released) == ("cancelled", True)


def test_staff_without_the_operate_permission_can_look_but_not_act(client: Client) -> None:
    user = User.objects.create_user("viewer", password="x-" * 8, is_staff=True)
    client.force_login(user)
    run = make_run()
    assert client.get(reverse("admin:workflows_run_change", args=[run.pk])).status_code == 200
    client.post(reverse("admin:workflows_run_action", args=[run.pk, "cancel"]), {"reason": "no"})
    run.refresh_from_db()
    assert run.state == "running"
    assert not RunEvent.objects.exists()


def test_the_admin_is_for_staff_only(client: Client) -> None:
    client.force_login(User.objects.create_user("someone", password="y-" * 8))
    response = client.get(reverse("admin:workflows_run_changelist"))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_run_list_filters_by_the_honest_state(admin_client: Client) -> None:
    make_run("waits")
    failed = make_run("broke", state="failed", steps=(("a", "noop", "failed"),))
    make_run("broke-too", state="failed", steps=(("a", "noop", "failed"),))
    Run.objects.filter(pk=failed.pk).update(released=True)
    url = reverse("admin:workflows_run_changelist")
    waiting = admin_client.get(url + "?state=awaiting_approval").content.decode()
    assert "fleet/waits" in waiting and "fleet/broke" not in waiting
    released = admin_client.get(url + "?state=released").content.decode()
    assert "fleet/broke<" in released and "fleet/broke-too" not in released
    assert 'nowrap">released</span>' in released and 'nowrap">failed</span>' not in released
    assert "waiting for approval" in admin_client.get(url).content.decode()


def test_the_hook_call_page_shows_its_time_and_links_to_the_runs_it_answered(
    admin_client: Client, django_assert_max_num_queries: object
) -> None:
    run = make_run()
    other = make_run("c1-notify", state="succeeded")
    # The same cluster and moment, another template.
    Run.objects.filter(pk=other.pk).update(
        template_name="notify", cluster_key=run.cluster_key, cluster_name="c1"
    )
    call = HookCall.objects.create(
        hook=run.hook,
        handler="before-upgrade",
        cluster_key=run.cluster_key,
        cluster_namespace="fleet",
        cluster_name="c1",
        moment=run.moment,
        status="Success",
        retry_after=10,
        message=run.message,
        latency_ms=2.0,
    )
    HookCall.objects.create(
        hook=run.hook,
        handler="before-upgrade",
        cluster_key="uid-nobody",
        cluster_namespace="fleet",
        cluster_name="nobody",
        moment="",
        status="Success",
        retry_after=0,
        message="",
        latency_ms=1.0,
    )
    with django_assert_max_num_queries(6):  # type: ignore[operator]
        listing = admin_client.get(reverse("admin:workflows_hookcall_changelist")).content.decode()
    second = timezone.localtime(call.at).strftime("%Y-%m-%d %H:%M:%S")
    assert second in listing
    assert f'<a href="{reverse("admin:workflows_run_change", args=[run.pk])}">run {run.pk}</a>' in (
        listing
    )
    assert "+1 more" in listing
    detail = admin_client.get(
        reverse("admin:workflows_hookcall_change", args=[call.pk])
    ).content.decode()
    assert second in detail
    assert f"run {run.pk} (gate)" in detail and f"run {other.pk} (notify)" in detail


def test_the_hook_call_list_shows_a_long_messages_start_and_the_call_page_all_of_it(
    admin_client: Client,
) -> None:
    """A failed step's message carries its hint (up to 500 characters): in full, the list's
    later columns (latency, runs) went off a 1280 px screen."""
    hint = "workflow gate failed at step backup: " + "x" * 200 + " END-OF-HINT"
    call = HookCall.objects.create(
        hook="BeforeClusterUpgrade",
        handler="before-upgrade",
        cluster_key="uid-fleet-c1",
        cluster_namespace="fleet",
        cluster_name="c1",
        moment="v1.33.0",
        status="Failure",
        retry_after=0,
        message=hint,
        latency_ms=1.0,
    )
    listing = admin_client.get(reverse("admin:workflows_hookcall_changelist")).content.decode()
    assert f'<span class="hk-line" title="{hint}">{hint[:160]}…</span>' in listing
    assert listing.count("END-OF-HINT") == 1, "the whole text once: on hover, not in the cell"
    detail = admin_client.get(
        reverse("admin:workflows_hookcall_change", args=[call.pk])
    ).content.decode()
    assert hint in detail


def test_a_call_a_bypass_answered_links_to_it_not_to_the_runs(
    admin_client: Client,
) -> None:
    """A bypassed call answered from no run: the list and the call's page name the bypass
    (read back from the message the hook path wrote), not the cluster's runs of that moment."""
    run = make_run()
    wf.template("gate", hook=run.hook)
    covering = bypasses.bypass_open(
        hook=run.hook, duration=datetime.timedelta(hours=1), actor="ops", reason="restore drill"
    )
    answered = answers.answer(
        wf.call(run.hook, cluster=capi.cluster_v1beta2(name="c1")),
        handler_name="test",
    )
    call = HookCall.objects.create(
        hook=run.hook,
        handler="before-upgrade",
        cluster_key=run.cluster_key,
        cluster_namespace="fleet",
        cluster_name="c1",
        moment=run.moment,
        status=answered.status,
        retry_after=answered.retry_after,
        message=answered.message,
        latency_ms=1.0,
    )
    link = (
        f'<a href="{reverse("admin:workflows_bypass_change", args=[covering.pk])}">'
        f"bypass {covering.pk}</a>"
    )
    listing = admin_client.get(reverse("admin:workflows_hookcall_changelist")).content.decode()
    assert link in listing
    assert reverse("admin:workflows_run_change", args=[run.pk]) not in listing
    detail = admin_client.get(
        reverse("admin:workflows_hookcall_change", args=[call.pk])
    ).content.decode()
    assert f"none: {link}" in detail
