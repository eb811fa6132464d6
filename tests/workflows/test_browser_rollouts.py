"""The fleet page shows a halted rollout, in Debian's Chromium at 1280 px: the halt on top
(which canary failed which workflow, and the commands that resume or abandon), then one
row per wave, following the page's filters. Real hook server and worker; screenshots
under test-output/<test name>/.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import BrowserContext, Page, expect

from tests.support import capi, servers
from tests.support import workflows as wf
from tests.support.worker import Worker
from tests.workflows import rollouts
from tests.workflows.test_browser import browser, fits, operator_page, shoot
from tests.workflows.test_worker import wait_for
from workflows.models import Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

__all__ = ["browser"]  # the fixture, used by name


#: The main wave's clusters.
WAVE = 60


def _post(
    hook_server: servers.HookServer, hook: str, name: str, namespace: str = "fleet", **labels: str
) -> None:
    cluster = capi.cluster_v1beta2(name=name, namespace=namespace, uid=f"uid-{name}", labels=labels)
    status, _ = hook_server.post(capi.hook_path(hook), capi.hook_request(hook, cluster))
    assert status == 200


#: How far down the held list may start: within the first screen (900 px high); a table of
#: every waiting cluster put it 3,263 px down with one 60-cluster wave (issue 33).
FIRST_SCREEN = 900


def _top(page: Page, selector: str) -> float:
    box = page.locator(selector).bounding_box()
    assert box is not None, f"{selector} is not shown"
    return float(box["y"])


def test_the_fleet_shows_a_halted_60_cluster_wave_in_one_row_and_follows_the_filters(
    hook_server: servers.HookServer,
    worker: Worker,
    browser: BrowserContext,
    output_dir: Path,
) -> None:
    """The halt on top (which canary failed which workflow, and the commands that resume or
    abandon), then one row per wave: how many clusters it holds and what they wait for;
    the held list starts on the first screen. Filtered to another namespace, the table
    shows nothing of the wave."""
    rollouts.templates()
    wf.template(
        "other-approval",
        steps=[{"name": "approve", "type": "approval"}],
        clusterSelector={"matchLabels": {"team": "other"}},
    )
    _post(hook_server, "AfterClusterUpgrade", "canary-3", ring="canary", health="bad")
    wait_for(
        lambda: Run.objects.filter(template_name="canary-health", state="failed").exists(),
        what="canary-3's checks failed",
    )
    failed = Run.objects.get(template_name="canary-health")
    for n in range(1, WAVE + 1):
        _post(hook_server, "BeforeClusterUpgrade", f"main-{n:02d}", ring="main")
    _post(hook_server, "BeforeClusterUpgrade", "billing-1", namespace="other", team="other")
    wait_for(
        lambda: Run.objects.filter(message__contains="halts the rollout").count() == WAVE,
        what="the whole wave halted",
        timeout=120,
    )

    page = operator_page(browser, f"https://localhost:{hook_server.port}")
    halt = page.locator("[data-halt='v1.33.0']")
    expect(halt).to_contain_text(
        f"Rollout to v1.33.0 halted: canary fleet/canary-3 failed workflow canary-health "
        f"(run {failed.pk})"
    )
    expect(halt).to_contain_text("workflows rollout resume v1.33.0 --reason")
    expect(halt).to_contain_text("workflows rollout abandon v1.33.0 --reason")
    rows = page.locator("#rollouts tbody tr")
    expect(rows).to_have_count(1)
    wave = page.locator("#rollouts tr[data-wave='wave-main']")
    expect(wave).to_contain_text(f"{WAVE} clusters")
    expect(wave).to_contain_text(
        "workflow wave-main halts the rollout to v1.33.0: canary fleet/canary-3 failed "
        f"workflow canary-health (run {failed.pk})"
    )
    assert _top(page, "#fleet") < FIRST_SCREEN, "the held list starts on the first screen"
    fits(page, 1280)
    shoot(page, output_dir, "rollout-halted")

    page.select_option("#fleet-filters select[name=namespace]", "other")
    page.click("#fleet-filters input[type=submit]")
    expect(page.locator("#fleet")).to_contain_text("other/billing-1")
    expect(page.locator("#rollouts")).to_have_count(0)
    assert _top(page, "#fleet") < FIRST_SCREEN
    shoot(page, output_dir, "rollout-filtered-away")

    page.goto(f"https://localhost:{hook_server.port}/admin/")
    page.locator("#rollouts tr[data-wave='wave-main'] a").click()
    expect(page.locator("#fleet-filters select[name=template]")).to_have_value("wave-main")
    expect(page.locator("#rollouts tbody tr")).to_have_count(1)

    call_command(
        "workflows", "rollout", "resume", "v1.33.0", "--reason", "canary-3's disk",
        "--actor", "cli:ann", stdout=io.StringIO(),
    )  # fmt: skip
    wait_for(
        lambda: not Run.objects.filter(message__contains="halts the rollout").exists(),
        what="the halt lifted",
        timeout=120,
    )
    page.reload()
    expect(page.locator("[data-halt]")).to_have_count(0)
    expect(page.locator("#rollouts tr[data-wave='wave-main']")).to_contain_text(
        "waits for 2 canaries ring=canary to pass AfterClusterUpgrade at v1.33.0"
    )
    rollouts.drained()
