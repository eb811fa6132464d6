"""What a newcomer reads on the pages, in Debian's Chromium against the real server.

A run's page says a stall in the words the fleet page and `workflows why` use (one source,
workflows.engine.stalls.wording). Screenshots under test-output/<test name>/.
"""

from __future__ import annotations

import datetime
import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import BrowserContext, expect

from tests.support import servers
from tests.support import workflows as wf
from tests.workflows.test_browser import browser, fits, operator_page, shoot
from workflows.models import Run, StepRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

__all__ = ["browser"]  # the fixture, used by name

STALLED = "step conformance stalled: no progress for 47 min (normal: up to 30 min)"


def stalled_run(name: str = "stalled-1") -> Run:
    """A run whose conformance step has said the same for 47 minutes (its normal: 30)."""
    now = timezone.now()
    run = Run.objects.create(
        template_name="upgrade-checks",
        template_generation=1,
        spec=wf.spec(
            steps=[{"name": "conformance", "type": "k8s_job", "with": {"image": "e2e:v1.33.1"}}]
        ),
        hook="BeforeClusterUpgrade",
        cluster_key=f"uid-fleet-{name}",
        cluster_namespace="fleet",
        cluster_name=name,
        moment="v1.32.4->v1.33.1",
        state="running",
        message="workflow upgrade-checks is running step conformance",
    )
    waits = "Job fleet/hooksvc-conformance: 0 of 1 Pods scheduled (0/3 nodes are available)"
    step = StepRun.objects.create(
        run=run, name="conformance", position=0, type="k8s_job", state="waiting",
        stall_seconds=1800, started_at=now - datetime.timedelta(hours=1), message=waits,
    )  # fmt: skip
    StepRun.objects.filter(pk=step.pk).update(progress_at=now - datetime.timedelta(minutes=47))
    Run.objects.filter(pk=run.pk).update(created_at=now - datetime.timedelta(hours=1))
    return run


def test_a_run_page_says_a_stall_as_the_fleet_and_why_say_it(
    hook_server: servers.HookServer, browser: BrowserContext, output_dir: Path
) -> None:
    run = stalled_run()
    out = io.StringIO()
    call_command("workflows", "why", "fleet/stalled-1", stdout=out)
    assert STALLED in out.getvalue()
    page = operator_page(browser, f"https://localhost:{hook_server.port}")
    expect(page.locator(f'#fleet [data-stalled="{run.pk}"]')).to_have_text(STALLED)

    page.goto(f"https://localhost:{hook_server.port}/admin/workflows/run/{run.pk}/change/")
    expect(page.locator(f'#run-live [data-stalled="{run.pk}"]')).to_have_text(STALLED)
    expect(page.locator('tr[data-step="conformance"] .hk-stalled')).to_have_text(STALLED)
    fits(page)
    shoot(page, output_dir, "run-stalled")
