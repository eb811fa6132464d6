"""Operator actions through the API are idempotent: one whose effect is there already says
so (`changed: false`, 200) and records nothing; concurrent approvals of one step, through
the real server, record one approval.

The second approval waits for the first's lock on the run row
(workflows.operators.actions, `_lock_run`), then finds the step approved.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import threading
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.api.conftest import Api, make_token, waiting_run
from tests.support import servers
from workflows.models import Run, RunEvent, StepRun

REASON = {"reason": "CAB-7"}


def _events(run: Run, name: str) -> int:
    return RunEvent.objects.filter(run=run, kind="action", name=name).count()


@pytest.fixture
def admin(api: Api) -> APIClient:
    return api(make_token("admin", ["admin"]))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("action", "body", "state", "says"),
    [
        ("approve", {"step": "approve"}, "running", "is already approved (by token:admin)"),
        ("release", {}, "running", "is already released"),
        ("cancel", {}, "running", "is already cancelled"),
        ("skip", {"step": "approve"}, "running", "is already skipped"),
    ],
)
def test_doing_it_again_says_so_and_changes_nothing(
    admin: APIClient, action: str, body: dict[str, str], state: str, says: str
) -> None:
    run = waiting_run("team-a")
    path = f"/api/v1/runs/{run.pk}/{action}/"
    first = admin.post(path, {**body, **REASON}, format="json").json()
    assert first["changed"] is True
    before = (Run.objects.values().get(), list(StepRun.objects.values()))
    again = admin.post(path, {**body, "reason": "again"}, format="json")
    assert again.status_code == 200
    assert again.json()["changed"] is False
    assert says in again.json()["detail"] and again.json()["detail"].endswith("nothing changed")
    assert (Run.objects.values().get(), list(StepRun.objects.values())) == before
    assert _events(run, action) == 1


@pytest.mark.django_db
def test_retrying_a_run_that_is_running_says_so(admin: APIClient) -> None:
    run = waiting_run("team-a")
    Run.objects.filter(pk=run.pk).update(state="failed")
    StepRun.objects.filter(run=run).update(state="failed", message="boom")
    first = admin.post(f"/api/v1/runs/{run.pk}/retry/", REASON, format="json").json()
    assert (first["changed"], first["run"]["state"]) == (True, "running")
    again = admin.post(f"/api/v1/runs/{run.pk}/retry/", REASON, format="json").json()
    assert again["changed"] is False
    assert again["detail"] == (
        f"run {run.pk} has no failed or cancelled step to retry: the run is running, its steps "
        "are approve pending: nothing changed"
    )
    step = admin.post(
        f"/api/v1/runs/{run.pk}/retry/", {"step": "approve", **REASON}, format="json"
    ).json()
    assert step["changed"] is False
    assert step["detail"] == (
        f"run {run.pk} is already running: step 'approve' is pending: nothing changed"
    )
    assert _events(run, "retry") == 1


@pytest.mark.django_db
def test_a_bulk_approval_of_approved_runs_reports_them_unchanged(admin: APIClient) -> None:
    runs = [waiting_run("team-a", name=f"c{i}") for i in range(3)]
    admin.post(f"/api/v1/runs/{runs[0].pk}/approve/", {"step": "approve", **REASON}, format="json")
    body = {"action": "approve", "ids": [r.pk for r in runs], **REASON}
    result = admin.post("/api/v1/runs/bulk/", body, format="json").json()
    assert [(o["ok"], o["changed"]) for o in result["outcomes"]] == [
        (True, False),
        (True, True),
        (True, True),
    ]
    assert RunEvent.objects.filter(kind="action", name="approve").count() == 3


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_concurrent_approvals_of_one_step_record_one_approval(
    hook_server: servers.HookServer,
) -> None:
    run = waiting_run("team-a")
    callers = [make_token(f"bot-{i}", ["operator"]) for i in range(8)]
    start = threading.Barrier(len(callers))

    def approve(secret: str) -> tuple[int, dict[str, Any]]:
        connection = hook_server.connection()
        try:
            connection.connect()
            start.wait(timeout=30)
            connection.request(
                "POST",
                f"/api/v1/runs/{run.pk}/approve/",
                body=json.dumps({"step": "approve", **REASON}),
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {secret}"},
            )
            response: http.client.HTTPResponse = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    with concurrent.futures.ThreadPoolExecutor(len(callers)) as pool:
        answers = list(pool.map(approve, callers))
    assert [status for status, _ in answers] == [200] * len(callers), answers
    changed = [body for _, body in answers if body["changed"]]
    assert len(changed) == 1, answers
    events = RunEvent.objects.filter(run=run, kind="action", name="approve")
    assert events.count() == 1
    winner = events.get().actor
    assert StepRun.objects.get().memo["approved_by"] == winner
    for _, body in answers:
        if not body["changed"]:
            assert f"is already approved (by {winner})" in body["detail"]


@pytest.mark.django_db
def test_the_admin_says_an_approval_was_there_already() -> None:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    run = waiting_run("team-a")
    browser = Client()
    browser.force_login(User.objects.create_superuser("root", "root@example.com", "pw-" * 4))
    url = reverse("admin:workflows_run_step_action", args=[run.pk, "approve", "approve"])
    browser.post(url, {"reason": "CAB-7"}, secure=True)
    page = browser.post(url, {"reason": "again"}, secure=True, follow=True).content.decode()
    assert "is already approved (by admin:root): nothing changed." in page
    assert _events(run, "approve") == 1
