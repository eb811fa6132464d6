"""What a newcomer reads on the pages, in Debian's Chromium against the real server.

A run's page says a stall in the words the fleet page and `workflows why` use (one source,
workflows.engine.stalls.wording). `make run-signin` (HOOKSVC_DEV_SIGNIN=1) serves with a local
OpenID Connect provider and sample people: its sign-in button names the provider as
configured (not "Sign in with localhost"), ann signs in with one click and sees team-a's
cluster only, and `workflows list --as ann@example.com` beside it answers the same.
Screenshots under test-output/<test name>/.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from playwright.sync_api import BrowserContext, expect

from tests.identity.test_role_matrix import waiting_run
from tests.support import servers
from tests.support import workflows as wf
from tests.workflows.test_browser import browser, fits, operator_page, shoot
from workflows.models import Run, StepRun
from workflows.rollout_actions import RolloutAction

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


@contextlib.contextmanager
def make_run_signin(tmp_path: Path, database: str, broker: str) -> Iterator[tuple[int, Path]]:
    """`make run-signin`'s command, against the tests' database and Redis: its port, data dir."""
    port, provider_port = servers.free_port(), servers.free_port()
    data_dir = tmp_path / "var"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HOOKSVC_", "DATABASE_", "CELERY_", "PROMETHEUS_", "DJANGO_"))
    }
    env.update(
        {
            "HOOKSVC_DEV_SIGNIN": "1",
            "HOOKSVC_DEV_SIGNIN_PORT": str(provider_port),
            "HOOKSVC_DATA_DIR": str(data_dir),
            "HOOKSVC_BIND": f"127.0.0.1:{port}",
            "HOOKSVC_WEB_WORKERS": "1",
            "DATABASE_URL": database,
            "CELERY_BROKER_URL": broker,
        }
    )
    log_path = tmp_path / "make-run.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "hooksvc.serving.devserver"],
            cwd=servers.ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while "Booting worker" not in log_path.read_text(errors="replace"):
            assert process.poll() is None, log_path.read_text(errors="replace")
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")
            time.sleep(0.2)
        yield port, data_dir
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_make_run_signin_signs_sample_people_in_with_their_roles(
    tmp_path: Path, browser: BrowserContext, output_dir: Path
) -> None:
    waiting_run("team-a")
    waiting_run("team-b")
    s = connection.settings_dict
    database = f"postgres://{s['USER']}@{s['HOST']}:{s['PORT']}/{s['NAME']}"

    with make_run_signin(tmp_path, database, settings.CELERY_BROKER_URL) as (port, data_dir):
        log = (tmp_path / "make-run.log").read_text()
        assert "Local sign-in provider: https://localhost:" in log
        assert "ann (team-a-operators)" in log
        page = browser.new_page()
        page.set_default_timeout(30_000)
        page.goto(f"https://localhost:{port}/admin/")
        expect(page.locator("#sso-sign-in")).to_have_text("Sign in with the local test provider")
        shoot(page, output_dir, "sign-in")
        page.click("#sso-sign-in")
        # The provider's form: one button per sample person.
        page.get_by_role("button", name="ann", exact=True).click()

        rows = page.locator("#fleet tbody.hk-cluster")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("team-a/team-a-prod")
        expect(page.locator("#user-tools")).to_contain_text("ann@example.com")
        shoot(page, output_dir, "fleet-as-ann")

        # Beside it, with nothing exported: the CLI answers as the browser shows.
        clean = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("HOOKSVC_", "DATABASE_", "CELERY_", "DJANGO_"))
        }
        done = subprocess.run(
            [sys.executable, "manage.py", "workflows", "list", "--as", "ann@example.com"],
            cwd=servers.ROOT,
            env={**clean, "HOOKSVC_DATA_DIR": str(data_dir)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "team-a-prod" in done.stdout and "team-b-prod" not in done.stdout, done.stdout


#: How every page writes a time (workflows.durations.at): to the second, with its zone.
A_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


def test_every_time_on_a_run_page_and_the_run_list_is_written_one_way_with_its_zone(
    hook_server: servers.HookServer, browser: BrowserContext, output_dir: Path
) -> None:
    """The run page wrote its summary "2026-11-28 12:03:04", its history and hook calls the
    same without a zone, "held for" with "UTC", and the admin's lists Django's "Nov. 28,
    2026, 12:03 p.m."; a reader could not tell which zone any of them was in."""
    import re

    run = waiting_run("team-a")
    page = operator_page(browser, f"https://localhost:{hook_server.port}")
    call_command(
        "workflows", "approve", str(run.pk), "--step", "approve", "--reason", "CAB-1",
        "--actor", "ops:ann", stdout=io.StringIO(),
    )  # fmt: skip
    page.goto(f"https://localhost:{hook_server.port}/admin/workflows/run/{run.pk}/change/")
    history = page.locator("#history tbody tr td:first-child")
    expect(history.first).to_have_text(re.compile(f"^{A_TIME}$"))
    calls = page.locator("#hook-calls tbody tr td:first-child")
    expect(calls.first).to_have_text(re.compile(f"^{A_TIME}"))
    summary = page.locator(".hk-summary dd")
    expect(summary.nth(2)).to_have_text(re.compile(f"^{A_TIME}$"))  # created
    shoot(page, output_dir, "run-times")
    page.goto(f"https://localhost:{hook_server.port}/admin/workflows/hookcall/")
    expect(page.locator("#result_list tbody tr").first).to_contain_text(re.compile(A_TIME))


def test_the_fleet_counters_stay_on_one_line_at_1280_px_beside_a_halt_and_a_stall(
    hook_server: servers.HookServer, browser: BrowserContext, output_dir: Path
) -> None:
    """With a halted (abandoned) rollout's banner, a stalled step and clusters held in every
    state at several hooks, the counters wrapped onto a second line at 1280 px."""
    now = timezone.now()
    stalled_run()
    for namespace in ("team-a", "team-b"):
        waiting_run(namespace)
    gated = Run.objects.create(
        template_name="wave-main", template_generation=1, spec=wf.spec(),
        hook="BeforeClusterUpgrade", cluster_key="uid-main-1", cluster_namespace="fleet",
        cluster_name="main-1", moment="v1.32.4->v1.33.0", state="running",
        context={"toKubernetesVersion": "v1.33.0"},
        message="workflow wave-main waits for 1 canary ring=canary",
    )  # fmt: skip
    StepRun.objects.create(
        run=gated, name="canaries", position=0, type="gate", state="waiting",
        params={"matchLabels": {"ring": "canary"}, "count": 1},
    )  # fmt: skip
    RolloutAction.objects.create(
        version="v1.33.0", kind="abandon", actor="cli:ann", reason="canary-3 lost its disks",
        created_at=now,
    )  # fmt: skip
    for name, state, hook, released in (
        ("gone-1", "failed", "BeforeClusterDelete", False),
        ("new-1", "pending", "BeforeClusterCreate", False),
        ("upd-1", "running", "BeforeClusterUpgrade", True),
        ("cp-1", "failed", "AfterControlPlaneInitialized", False),
        ("cp-2", "running", "AfterControlPlaneInitialized", False),
        ("cp-3", "cancelled", "AfterControlPlaneInitialized", False),
        ("cp-4", "pending", "AfterControlPlaneInitialized", False),
    ):
        Run.objects.create(
            template_name=f"t-{name}", template_generation=1, spec=wf.spec(), hook=hook,
            cluster_key=f"uid-{name}", cluster_namespace="fleet", cluster_name=name,
            state=state, finished_at=now if state in ("failed", "cancelled") else None,
            released=released,
        )  # fmt: skip
    page = operator_page(browser, f"https://localhost:{hook_server.port}")
    expect(page.locator("[data-halt='v1.33.0']")).to_be_visible()
    expect(page.locator("#stalled-count")).to_be_visible()
    tops = page.evaluate(
        "[...document.querySelectorAll('#fleet-counts > *')]"
        ".map(e => [e.id || e.className, Math.round(e.getBoundingClientRect().top)])"
    )
    assert len({top for _, top in tops}) == 1, f"the counters wrap at 1280 px: {tops}"
    fits(page)
    shoot(page, output_dir, "fleet-counters")
