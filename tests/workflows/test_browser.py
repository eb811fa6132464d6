"""The admin in a real browser: Playwright drives Debian's Chromium against the real servers.

CAPI-shaped hook calls start the runs through the real hook server and a real worker runs
them. An operator lands on the fleet, approves twenty clusters at once from it, reads a run's
page (which refreshes itself while the run is active), approves one run from its page and
sees it succeed without reloading. Break glass: a bypass lets a canary cluster's call through
and shows as a banner on the fleet, and its answer in the hook calls. Screenshots at 1280 and
1920 px wide are kept under test-output/<test name>/.
"""

from __future__ import annotations

import datetime
import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connections
from django.utils import timezone
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright

from tests.support import capi, servers
from tests.support import workflows as wf
from tests.support.worker import Worker
from tests.workflows.test_worker import wait_for
from workflows.engine import messages
from workflows.models import Bypass, HookCall, Run, RunEvent, StepRun

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
ASKS = "Upgrade window CHG-1234 open? Check the change calendar first."
WIDTHS = (1280, 1920)


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BrowserContext]:
    if not CHROMIUM.exists():
        pytest.skip(
            "Debian's Chromium is missing: apt-get install --no-install-recommends chromium"
        )
    # Playwright's sync API keeps an event loop in this thread, which Django takes for async
    # code calling the ORM; the loop is Playwright's own and never runs Django code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        # A fresh profile every run; the test CA is not in it, so the certificate is ignored.
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            ignore_https_errors=True,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            # The test's ORM calls while Playwright's loop runs get connections of their own
            # (asgiref's context-local storage): close them, or the test database stays busy.
            connections.close_all()
            context.close()


def operator_page(context: BrowserContext, base: str) -> Page:
    operator = User.objects.create_superuser("operator")
    # The server runs hooksvc's settings, whose hashers do not include the tests' fast MD5.
    hasher = PBKDF2PasswordHasher()
    operator.password = hasher.encode(PASSWORD, hasher.salt())
    operator.save()
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    return page


def shoot(page: Page, directory: Path, name: str) -> None:
    """The page at each width the issue names, full length."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(directory / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def start_runs(hook_server: servers.HookServer, namespace: str, count: int) -> list[Run]:
    for i in range(1, count + 1):
        cluster = capi.cluster_v1beta2(
            name=f"prod-{i:02d}",
            namespace=namespace,
            uid=f"uid-{namespace}-{i:02d}",
            labels={"env": "prod"},
        )
        status, answer = hook_server.post(capi.hook_path(HOOK), capi.hook_request(HOOK, cluster))
        assert (status, answer["retryAfterSeconds"]) == (200, 1), answer
    wait_for(
        lambda: StepRun.objects.filter(name="approve", state="waiting").count() >= count,
        what=f"{count} approval steps waiting",
    )
    return list(Run.objects.filter(cluster_namespace=namespace))


def gate_template() -> None:
    wf.template(
        "upgrade-gate",
        retryAfterSeconds=1,
        steps=[
            {"name": "approve", "type": "approval", "with": {"message": ASKS}},
            {"name": "after", "type": "noop", "dependsOn": ["approve"]},
        ],
    )


def neighbours() -> None:
    """What a real fleet also shows: a run that failed, and one an operator released."""
    now = timezone.now()
    created = Run.objects.create(
        template_name="install-cni",
        template_generation=1,
        spec=wf.spec("AfterControlPlaneInitialized"),
        hook="AfterControlPlaneInitialized",
        cluster_key="uid-edge-7",
        cluster_namespace="edge",
        cluster_name="edge-7",
        state="succeeded",
        started_at=now - datetime.timedelta(hours=3),
        finished_at=now - datetime.timedelta(hours=3) + datetime.timedelta(seconds=134),
    )
    Run.objects.filter(pk=created.pk).update(created_at=created.started_at)
    StepRun.objects.create(
        run=created,
        name="cni",
        position=0,
        type="addon_install",
        state="succeeded",
        started_at=created.started_at,
        finished_at=created.finished_at,
    )
    for name, released in (("edge-7", False), ("edge-9", True)):
        run = Run.objects.create(
            template_name="backup-before-upgrade",
            template_generation=3,
            spec=wf.spec(),
            hook=HOOK,
            cluster_key=f"uid-{name}",
            cluster_namespace="edge",
            cluster_name=name,
            moment="v1.32.4->v1.33.1",
            state="failed",
            released=released,
            finished_at=now,
            deadline_at=now - datetime.timedelta(minutes=5),
        )
        failure = "Velero Backup ended Failed: 2 of 9 volumes not snapshotted"
        # The message the engine writes for a failed step, with this run's own retry hint.
        Run.objects.filter(pk=run.pk).update(
            created_at=now - datetime.timedelta(minutes=47),
            message=messages.run_failed_at_step(run.pk, run.template_name, "backup", failure),
        )
        StepRun.objects.create(
            run=run,
            name="backup",
            position=0,
            type="backup_pvs",
            state="failed",
            retries=3,
            failures=4,
            message=failure,
        )


def test_an_operator_approves_twenty_clusters_from_the_fleet(
    hook_server: servers.HookServer,
    worker: Worker,
    browser: BrowserContext,
    output_dir: Path,
) -> None:
    gate_template()
    runs = start_runs(hook_server, "fleet", 20)
    neighbours()
    page = operator_page(browser, f"https://localhost:{hook_server.port}")

    # The fleet: clusters held on top and by what, one row per cluster, the approval's own
    # text as the why; the released run holds nothing and is counted apart.
    expect(page.locator("#site-name")).to_have_text("hooksvc")
    expect(page.get_by_text("View site")).to_have_count(0)
    counts = page.locator("#fleet-counts")
    expect(counts.locator('[data-count="held"] strong')).to_have_text("21")
    expect(counts.locator('[data-state="awaiting_approval"] strong')).to_have_text("20")
    expect(counts.locator('[data-state="failed"] strong')).to_have_text("1")
    expect(counts.locator('[data-count="background"] strong')).to_have_text("1")
    rows = page.locator("#fleet tbody.hk-cluster")
    expect(rows).to_have_count(21)
    expect(rows.first).to_contain_text("edge/edge-7")  # held longest comes first
    expect(rows.filter(has_text="fleet/prod-07")).to_contain_text(ASKS)
    expect(rows.filter(has_text="edge/edge-9")).to_have_count(0)
    shoot(page, output_dir, "fleet")
    page.click("#background-count")
    expect(page.locator("#fleet tr.hk-apart")).to_have_count(1)
    expect(page.locator("#fleet tr.hk-apart")).to_contain_text("edge/edge-9")
    expect(page.locator("#fleet tr.hk-apart")).to_contain_text("released")
    shoot(page, output_dir, "fleet-background")
    page.go_back()

    # Narrow to the twenty, tick them all, approve with one reason.
    page.select_option("#fleet-filters select[name=state]", "awaiting_approval")
    page.click("#fleet-filters input[type=submit]")
    expect(rows).to_have_count(20)
    page.check("#select-all")
    page.select_option("#bulk-action", "approve")
    page.click("#bulk-review")
    expect(page.locator("h1")).to_have_text("Approve: 20 runs")
    expect(page.locator("#bulk-runs tbody tr")).to_have_count(20)
    expect(page.locator("#bulk-runs")).to_contain_text(ASKS)
    shoot(page, output_dir, "bulk-confirm")
    page.fill("#id_reason", "CAB-1234 approved the window")
    page.click("#confirm-bulk")
    expect(page.locator("h1")).to_have_text("Approve: 20 of 20 done")
    expect(page.locator('#bulk-outcomes tr[data-ok="yes"]')).to_have_count(20)
    shoot(page, output_dir, "bulk-done")

    wait_for(
        lambda: Run.objects.filter(pk__in=[r.pk for r in runs], state="succeeded").count() == 20,
        what="the twenty runs succeeded",
    )
    events = RunEvent.objects.filter(kind="action", name="approve")
    assert events.count() == 20
    assert {(e.actor, e.reason) for e in events} == {
        ("admin:operator", "CAB-1234 approved the window")
    }

    # The fleet now shows only what still needs a person; the cluster's page its life.
    page.goto(page.url.split("/admin/")[0] + "/admin/")
    expect(counts.locator('[data-state="awaiting_approval"] strong')).to_have_text("0")
    expect(rows).to_have_count(1)
    page.get_by_role("link", name="All runs").click()
    expect(page.locator("#result_list")).to_contain_text("released")
    shoot(page, output_dir, "all-runs")
    page.go_back()
    page.locator("#fleet a", has_text="edge/edge-7").click()
    expect(page.locator("h1")).to_have_text("Cluster edge/edge-7")
    shoot(page, output_dir, "cluster")
    page.locator("#cluster-timeline a", has_text=HOOK).click()
    expect(page.locator("#run-state")).to_have_text("failed")
    expect(page.locator('tr[data-step="backup"]')).to_contain_text("2 of 9 volumes")
    shoot(page, output_dir, "run-failed")


def test_a_run_page_refreshes_itself_until_the_approved_run_succeeds(
    hook_server: servers.HookServer,
    worker: Worker,
    browser: BrowserContext,
    output_dir: Path,
) -> None:
    gate_template()
    (run,) = start_runs(hook_server, "fleet", 1)
    page = operator_page(browser, f"https://localhost:{hook_server.port}")
    page.locator("#fleet a", has_text="run ").first.click()
    expect(page.locator("#run-state")).to_have_text("waiting for approval")
    approve = page.locator('tr[data-step="approve"]')
    expect(approve).to_contain_text(ASKS)
    shoot(page, output_dir, "run-waiting")

    approve.get_by_role("link", name="Approve").click()
    expect(page.locator("#approval-text")).to_contain_text(ASKS)
    page.fill("#id_reason", "change window open")
    page.click("#confirm-action")
    expect(page.locator(".messagelist")).to_contain_text("recorded as admin:operator")

    # No reload: the live part of the page swaps itself in until the run is done.
    loaded = page.evaluate("performance.getEntriesByType('navigation')[0].startTime")
    started = time.monotonic()
    expect(page.locator("#run-state")).to_have_text("succeeded", timeout=60_000)
    assert page.evaluate("performance.getEntriesByType('navigation')[0].startTime") == loaded
    assert time.monotonic() - started < 60
    expect(page.locator('tr[data-step="after"]')).to_contain_text("succeeded")
    expect(page.locator("#run-live")).not_to_have_attribute("hx-trigger", "every 3s")
    shoot(page, output_dir, "run-succeeded")

    run.refresh_from_db()
    assert run.state == "succeeded"
    event = RunEvent.objects.get(name="approve")
    assert (event.actor, event.reason) == ("admin:operator", "change window open")


def test_break_glass_lets_calls_through_and_shows_on_the_fleet(
    hook_server: servers.HookServer,
    worker: Worker,
    browser: BrowserContext,
    output_dir: Path,
) -> None:
    gate_template()
    start_runs(hook_server, "fleet", 3)
    out = io.StringIO()
    call_command(
        "workflows", "bypass", "--hook", HOOK, "--namespace", "canary", "--selector",
        "env=prod", "--for", "2h", "--reason", "INC-42: gate template broken", "--actor",
        "cli:ann", stdout=out,
    )  # fmt: skip
    bypass = Bypass.objects.get()

    # A canary cluster's call proceeds at once and starts nothing; the message says why.
    cluster = capi.cluster_v1beta2(name="canary-1", namespace="canary", uid="uid-canary-1")
    status, answer = hook_server.post(capi.hook_path(HOOK), capi.hook_request(HOOK, cluster))
    assert (status, answer["status"], answer["retryAfterSeconds"]) == (200, "Success", 0)
    assert answer["message"].startswith(f"hooksvc bypass {bypass.pk} by cli:ann until ")
    assert answer["message"].endswith(
        ": INC-42: gate template broken; no workflow runs for this call"
    )
    assert not Run.objects.filter(cluster_namespace="canary").exists()

    page = operator_page(browser, f"https://localhost:{hook_server.port}")
    banner = page.locator("#bypasses")
    expect(banner).to_contain_text(
        f"bypass {bypass.pk}: {HOOK} for clusters matching env=prod in namespace canary, "
        "by cli:ann until"
    )
    expect(banner).to_contain_text("INC-42: gate template broken")
    expect(banner).to_contain_text(f"workflows bypass --end {bypass.pk} --reason")
    # The runs already held stay held: break glass changes answers, not runs.
    expect(page.locator("#fleet tbody.hk-cluster")).to_have_count(3)
    shoot(page, output_dir, "break-glass")

    page.get_by_role("link", name="Hook calls").click()
    expect(page.locator("#result_list")).to_contain_text(f"hooksvc bypass {bypass.pk}")
    shoot(page, output_dir, "break-glass-hook-calls")

    call_command("workflows", "bypass", "--end", str(bypass.pk), "--reason", "fixed", stdout=out)
    page.goto(page.url.split("/admin/")[0] + "/admin/")
    expect(page.locator("#bypasses")).to_have_count(0)


def fits(page: Page, width: int = 1280) -> None:
    """Nothing on the page reaches past `width` px: no horizontal scrolling, no column cut."""
    overflow = page.evaluate("document.documentElement.scrollWidth")
    assert overflow <= width, f"{page.url} is {overflow} px wide at {width} px"
    cut = page.evaluate(
        "w => [...document.querySelectorAll('th, td')]"
        ".filter(c => c.getBoundingClientRect().right > w + 1).map(c => c.textContent.trim())",
        width,
    )
    assert cut == [], f"{page.url}: cells past the right edge: {cut[:5]}"


def test_the_pages_fit_1280_px_and_say_what_holds_each_cluster(
    hook_server: servers.HookServer, browser: BrowserContext, output_dir: Path
) -> None:
    """At 1280 px: the hook-call list (its latency and runs columns were cut, its message
    column 90 px wide, the page 12,000 px tall), the fleet with a cluster held by an approval
    and two failed runs (each failed row repeated the whole retry command), a run's page with
    approval, wait and http steps, and a bulk approval that leaves the cluster held."""
    now = timezone.now()
    neighbours()
    gate = wf.spec(steps=[{"name": "approve", "type": "approval", "with": {"message": ASKS}}])
    held: list[Run] = []
    for template, state in (("upgrade-gate", "running"), ("notify-cmdb", "failed"),
                            ("backup-before-upgrade", "failed")):  # fmt: skip
        run = Run.objects.create(
            template_name=template,
            template_generation=1,
            spec=gate,
            hook=HOOK,
            cluster_key="uid-fleet-c1",
            cluster_namespace="fleet",
            cluster_name="c1",
            moment="v1.32.4->v1.33.1",
            state=state,
            finished_at=now if state == "failed" else None,
        )
        error = f"POST https://cmdb.example/api/v2/changes returned 503 ({template})"
        Run.objects.filter(pk=run.pk).update(
            created_at=now - datetime.timedelta(minutes=30 - len(held)),
            message=messages.run_failed_at_step(run.pk, template, "notify", error)
            if state == "failed"
            else "workflow upgrade-gate is waiting for approval at step approve",
        )
        for position, (name, kind, step_state) in enumerate(
            [("approve", "approval", "waiting"), ("settle", "wait", "waiting"),
             ("notify", "http", "failed" if state == "failed" else "pending")]
        ):  # fmt: skip
            StepRun.objects.create(
                run=run, name=name, position=position, type=kind, state=step_state, retries=3,
                waits_for_person=kind == "approval", failures=1 if step_state == "failed" else 0,
                message=error if step_state == "failed" else "",
                params={"message": ASKS} if kind == "approval" else {},
                started_at=now - datetime.timedelta(minutes=20),
            )  # fmt: skip
        held.append(run)
    hint = messages.run_failed_at_step(held[1].pk, "notify-cmdb", "notify", "x" * 300)
    HookCall.objects.bulk_create(
        HookCall(
            hook=HOOK,
            handler="before-cluster-upgrade",
            cluster_key="uid-fleet-c1",
            cluster_namespace="fleet",
            cluster_name="c1",
            moment=held[1].moment,
            status="Success",
            retry_after=10,
            message=hint,
            latency_ms=2.5,
        )
        for _ in range(120)
    )
    page = operator_page(browser, f"https://localhost:{hook_server.port}")

    row = page.locator('#fleet tbody.hk-cluster[data-cluster="fleet/c1"]')
    expect(row.locator("tr.hk-hold")).to_have_count(3)
    expect(row).to_contain_text("held by 3 runs")
    expect(row).to_contain_text(ASKS)
    expect(row).not_to_contain_text("workflows retry")
    fits(page)
    shoot(page, output_dir, "fleet")

    page.get_by_role("link", name="Hook calls").click()
    expect(page.locator("h1")).to_have_text("Hook calls")
    expect(page.locator(".breadcrumbs")).to_have_text(
        "Fleet \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} Hook calls"
    )
    expect(page.locator("#result_list tbody tr")).to_have_count(50)
    fits(page)
    message = page.locator("#result_list td.field-message_start").first.bounding_box()
    assert message is not None and message["width"] >= 200, message
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height <= 4000, f"the hook-call list is {height} px tall"
    for column in ("latency", "runs"):
        expect(page.locator(f"#result_list th.column-{column}")).to_be_in_viewport()
    shoot(page, output_dir, "hook-calls")

    page.goto(f"https://localhost:{hook_server.port}/admin/workflows/run/{held[0].pk}/change/")
    for step in ("approve", "settle"):
        expect(page.locator(f'tr[data-step="{step}"] td').nth(4)).to_have_text("-")
    expect(page.locator('tr[data-step="notify"] td').nth(4)).to_have_text("0 of 4")
    fits(page)
    shoot(page, output_dir, "run")

    page.goto(f"https://localhost:{hook_server.port}/admin/")
    row.locator(f'input[name=run][value="{held[0].pk}"]').check()
    page.select_option("#bulk-action", "approve")
    page.click("#bulk-review")
    warning = page.locator("#still-held")
    expect(warning).to_contain_text("1 cluster will stay held after this")
    expect(warning).to_contain_text(f"run {held[1].pk}")
    expect(warning).to_contain_text(f"run {held[2].pk}")
    fits(page)
    shoot(page, output_dir, "bulk-confirm-still-held")
