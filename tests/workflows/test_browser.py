"""The admin in a real browser: Playwright drives Debian's Chromium against the real servers.

An operator logs in, finds a run waiting for approval in the run list (with its progress
bar), opens its timeline, approves the step with a reason, and sees the run succeed once
the real worker has run the rest. Screenshots of the list and of the run's page are kept
under test-output/<test name>/.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect, sync_playwright

from tests.support import capi, servers
from tests.support import workflows as wf
from tests.support.worker import Worker
from tests.workflows.test_worker import wait_for
from workflows.models import Run, RunEvent

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHROMIUM = Path("/usr/bin/chromium")
#: Debian's Chromium, not a Playwright download: the machine reaches no browser CDN.
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOOK = "BeforeClusterUpgrade"
PASSWORD = "browser-test-password-1"
#: The run's own state on its page (the steps' badges are in the timeline's table cells).
RUN_BADGE = "div.form-row.field-state_badge .hooksvc-badge"


def reload_until_badge(page: Page, text: str, timeout: float = 60) -> None:
    """The worker finishes the run in the background: reload as an operator would."""
    badge = page.locator(RUN_BADGE)
    deadline = time.monotonic() + timeout
    while badge.inner_text() != text:
        assert time.monotonic() < deadline, f"run still {badge.inner_text()!r} after {timeout} s"
        time.sleep(0.5)
        page.reload()


def test_an_operator_approves_a_waiting_run_in_the_browser_and_sees_it_succeed(
    hook_server: servers.HookServer, worker: Worker, output_dir: Path, tmp_path: Path
) -> None:
    if not CHROMIUM.exists():
        pytest.skip(
            "Debian's Chromium is missing: apt-get install --no-install-recommends chromium"
        )
    operator = User.objects.create_superuser("operator")
    # The server runs hooksvc's settings, whose hashers do not include the tests' fast MD5.
    hasher = PBKDF2PasswordHasher()
    operator.password = hasher.encode(PASSWORD, hasher.salt())
    operator.save()
    wf.template(
        "gate",
        retryAfterSeconds=1,
        steps=[
            {"name": "approve", "type": "approval", "with": {"message": "ship it?"}},
            {"name": "after", "type": "noop", "dependsOn": ["approve"]},
        ],
    )
    cluster = capi.cluster_v1beta2(name="browser-1", namespace="fleet", uid="uid-browser-1")
    status, answer = hook_server.post(capi.hook_path(HOOK), capi.hook_request(HOOK, cluster))
    assert (status, answer["retryAfterSeconds"]) == (200, 1), answer
    run = Run.objects.get()
    wait_for(
        lambda: run.steps.filter(name="approve", state="waiting").exists(),
        what="the approval step waiting",
    )
    base = f"https://localhost:{hook_server.port}"

    with sync_playwright() as playwright:
        # A fresh profile every run; the test CA is not in it, so the certificate is ignored.
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            ignore_https_errors=True,
            viewport={"width": 1800, "height": 900},
        )
        try:
            page = context.new_page()
            page.set_default_timeout(30_000)
            page.goto(f"{base}/admin/login/?next=/admin/workflows/run/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")

            row = page.locator("#result_list tbody tr").filter(has_text="fleet/browser-1")
            expect(row.locator(".hooksvc-progress")).to_be_visible()
            expect(row).to_contain_text("0 of 2 steps")
            expect(row).to_contain_text("waiting for approval")
            page.screenshot(path=str(output_dir / "run-list.png"), full_page=True)

            row.get_by_role("link", name="fleet/browser-1").click()
            expect(page.locator(RUN_BADGE)).to_have_text("waiting for approval")
            timeline = page.locator(".inline-group").filter(has_text="Steps (timeline)")
            expect(timeline).to_contain_text("approve")
            expect(timeline).to_contain_text("after")
            page.screenshot(path=str(output_dir / "run-page.png"), full_page=True)

            timeline.get_by_role("link", name="Approve").click()
            page.fill("#id_reason", "change window open")
            page.click("#confirm-action")
            expect(page.locator(".messagelist")).to_contain_text("recorded as admin:operator")

            reload_until_badge(page, "succeeded")
            expect(timeline).to_contain_text("succeeded")
            page.screenshot(path=str(output_dir / "run-succeeded.png"), full_page=True)
        finally:
            context.close()

    run.refresh_from_db()
    assert run.state == "succeeded"
    event = RunEvent.objects.get(name="approve")
    assert (event.actor, event.reason) == ("admin:operator", "change window open")
