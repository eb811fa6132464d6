"""The fleet page shows a halted rollout, in Debian's Chromium at 1280 px: the halt on top
(which canary failed which workflow, and the commands that resume or abandon), then each
wave with its clusters and what each waits for. Real hook server and worker; screenshots
under test-output/<test name>/.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import BrowserContext, expect

from tests.support import capi, servers
from tests.support.worker import Worker
from tests.workflows import rollouts
from tests.workflows.test_browser import browser, fits, operator_page, shoot
from tests.workflows.test_worker import wait_for
from workflows.models import Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

__all__ = ["browser"]  # the fixture, used by name


def _post(hook_server: servers.HookServer, hook: str, name: str, **labels: str) -> None:
    cluster = capi.cluster_v1beta2(name=name, namespace="fleet", uid=f"uid-{name}", labels=labels)
    status, _ = hook_server.post(capi.hook_path(hook), capi.hook_request(hook, cluster))
    assert status == 200


def test_the_fleet_shows_a_halted_rollout_its_waves_and_what_each_cluster_waits_for(
    hook_server: servers.HookServer,
    worker: Worker,
    browser: BrowserContext,
    output_dir: Path,
) -> None:
    rollouts.templates()
    _post(hook_server, "AfterClusterUpgrade", "canary-3", ring="canary", health="bad")
    wait_for(
        lambda: Run.objects.filter(template_name="canary-health", state="failed").exists(),
        what="canary-3's checks failed",
    )
    failed = Run.objects.get(template_name="canary-health")
    for name in ("main-1", "main-2"):
        _post(hook_server, "BeforeClusterUpgrade", name, ring="main")
    wait_for(
        lambda: Run.objects.filter(message__contains="halts the rollout").count() == 2,
        what="both main clusters halted",
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
    expect(rows).to_have_count(2)
    expect(page.locator("#rollouts tr[data-cluster='fleet/main-1']")).to_contain_text(
        "workflow wave-main halts the rollout to v1.33.0: canary fleet/canary-3 failed "
        f"workflow canary-health (run {failed.pk})"
    )
    expect(page.locator("#rollouts tr[data-cluster='fleet/main-2']")).to_contain_text("wave-main")
    fits(page, 1280)
    shoot(page, output_dir, "rollout-halted")

    call_command(
        "workflows", "rollout", "resume", "v1.33.0", "--reason", "canary-3's disk",
        "--actor", "cli:ann", stdout=io.StringIO(),
    )  # fmt: skip
    wait_for(
        lambda: not Run.objects.filter(message__contains="halts the rollout").exists(),
        what="the halt lifted",
    )
    page.reload()
    expect(page.locator("[data-halt]")).to_have_count(0)
    expect(page.locator("#rollouts tr[data-cluster='fleet/main-1']")).to_contain_text(
        "waits for 2 canaries ring=canary to pass AfterClusterUpgrade at v1.33.0"
    )
    rollouts.drained()
