"""Stalls are visible (issue 22, invariant 10), everywhere an operator looks, through a real
worker: a step that polls and says the same thing for longer than its type's normal bound
shows as stalled in `workflows why` (naming what it waits for), in the REST API's why and
fleet, as the hooksvc_steps_stalled gauge, and as one Warning Event on its Cluster (in the
management cluster: the Kubernetes API emulator); once it makes progress it is stalled no
more. The fleet page marks it, in Chromium at 1280 px.

The test step type `stuck_poll` (tests/workflows/steps_for_tests.py) takes its normal bound
from its parameters (1 s here), as `wait` does; the worker's beat runs the reconciler's
pass, which announces stalls, every second (tests/support/worker.py).
"""

from __future__ import annotations

import datetime
import io
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from playwright.sync_api import BrowserContext, expect
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import make_token
from tests.support import capi, servers
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator
from tests.support.worker import Worker
from tests.workflows.steps_for_tests import PREFIX
from tests.workflows.test_browser import browser, fits, operator_page, shoot
from tests.workflows.test_worker import wait_for
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, StepRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

__all__ = ["browser"]  # the fixture, used by name

NS = "stall-ns"
CLUSTER = "stall-c1"
UID = "uid-stall-c1"


def _stalled_events(kube: KubeEmulator) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.list_objects("", "v1", "events", NS)
        if e["reason"] == "HooksvcStepStalled" and e["involvedObject"]["name"] == CLUSTER
    ]


def _gauge(client: Client, step_type: str) -> float | None:
    text = client.get("/metrics").content.decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "hooksvc_steps_stalled" and sample.labels == {"type": step_type}:
                return float(sample.value)
    return None


def _why(cluster: str) -> str:
    out = io.StringIO()
    call_command("workflows", "why", cluster, stdout=out)
    return out.getvalue()


def test_a_step_that_says_the_same_for_too_long_is_shown_stalled_everywhere(
    kube: KubeEmulator, kubeconfig_path: Path, tmp_path: Path, clean_redis: redis.Redis,
    no_worker: None,
) -> None:  # fmt: skip
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    done = tmp_path / "job-done"
    template = wf.template(
        "stall-job",
        steps=[
            {
                "name": "job",
                "type": "stuck_poll",
                "with": {"every": 0.5, "normalSeconds": 1, "untilFile": str(done)},
            }
        ],
    )
    call = wf.call(cluster=capi.cluster_v1beta2(name=CLUSTER, namespace=NS, uid=UID))
    worker = Worker(tmp_path / "data", tmp_path / "worker.log", kubeconfig=kubeconfig_path)
    worker.start()
    try:
        [run] = hook_runs.runs_ensure(templates=[template], call=call)
        wait_for(lambda: bool(_stalled_events(kube)), timeout=60, what="the stall's Event")
        polls = f"{PREFIX}:polls:hooksvc-{run.pk}-job"
        waits = f"waiting for Job hooksvc-{run.pk}-job to complete: 1 active"

        [event] = _stalled_events(kube)
        assert event["type"] == "Warning"
        assert event["involvedObject"]["uid"] == UID
        assert event["message"] == (
            f"workflow stall-job for BeforeClusterUpgrade {run.moment}: step job (stuck_poll)"
            f" has made no progress for longer than its normal 1 s: {waits}"
        )

        said = _why(f"{NS}/{CLUSTER}")
        assert "step job stalled: no progress for" in said, said
        assert "(normal: up to 1 s)" in said
        assert f"it waits for: {waits}" in said

        client = Client()
        assert _gauge(client, "stuck_poll") == 1

        api = Client(HTTP_AUTHORIZATION=f"Bearer {make_token('stall-viewer', ['viewer'])}")
        why = api.get(f"/api/v1/clusters/{NS}/{CLUSTER}/why/").json()
        [held] = why["groups"][0]["runs"]
        assert held["step"]["stalled"]["waitsFor"] == waits
        assert held["step"]["stalled"]["normal"] == "1 s"
        assert [s["name"] for s in held["stalledSteps"]] == ["job"]
        fleet = api.get("/api/v1/fleet/").json()
        [cluster] = [c for c in fleet["results"] if c["cluster"]["name"] == CLUSTER]
        assert cluster["runs"][0]["stalled"]["step"] == "job"
        assert api.get("/api/v1/fleet/counts/").json()["stalled"] == 1

        # A stall changes nothing by itself: the step is polled on, and announced once.
        seen = int(clean_redis.get(polls) or 0)
        wait_for(lambda: int(clean_redis.get(polls) or 0) >= seen + 6, what="six more polls")
        assert [e.get("count", 1) for e in _stalled_events(kube)] == [1]
        assert StepRun.objects.get(run=run).state == StepRun.State.WAITING

        # What it waited for came: it succeeds, and is stalled nowhere.
        done.touch()
        wait_for(lambda: Run.objects.get(pk=run.pk).state == Run.State.SUCCEEDED, what="success")
        assert _gauge(client, "stuck_poll") in (None, 0)
        assert "stalled" not in _why(f"{NS}/{CLUSTER}")
    finally:
        worker.stop()


def test_the_fleet_page_marks_a_stalled_step_at_1280_px(
    hook_server: servers.HookServer, browser: BrowserContext, output_dir: Path
) -> None:
    now = timezone.now()
    run = Run.objects.create(
        template_name="upgrade-checks",
        template_generation=1,
        spec=wf.spec(
            steps=[{"name": "conformance", "type": "k8s_job", "with": {"image": "e2e:v1.33.1"}}]
        ),
        hook="BeforeClusterUpgrade",
        cluster_key="uid-fleet-stalled",
        cluster_namespace="fleet",
        cluster_name="stalled-1",
        moment="v1.32.4->v1.33.1",
        state="running",
        message="workflow upgrade-checks is running step conformance",
    )
    waits = "Job fleet/hooksvc-conformance: 0 of 1 Pods scheduled (0/3 nodes are available)"
    step = StepRun.objects.create(
        run=run, name="conformance", position=0, type="k8s_job", state="waiting",
        stall_seconds=1800, started_at=now - datetime.timedelta(hours=1), message=waits,
    )  # fmt: skip
    # Its last progress 47 minutes ago (an update of progress_at alone is no report).
    StepRun.objects.filter(pk=step.pk).update(progress_at=now - datetime.timedelta(minutes=47))
    Run.objects.filter(pk=run.pk).update(created_at=now - datetime.timedelta(hours=1))
    page = operator_page(browser, f"https://localhost:{hook_server.port}")

    marked = page.locator(f'#fleet [data-stalled="{run.pk}"]')
    expect(marked).to_have_text(
        "step conformance stalled: no progress for 47 min (normal: up to 30 min)"
    )
    expect(page.locator("#stalled-count strong")).to_have_text("1")
    row = page.locator('#fleet tbody.hk-cluster[data-cluster="fleet/stalled-1"]')
    expect(row).to_contain_text(waits)
    fits(page)
    shoot(page, output_dir, "fleet-stalled")
