"""/metrics: names and values after scripted hook calls and runs, across processes.

Covers: hook calls counted by answer (blocked, then passed; a rejected request as failed)
with their latency; runs by template and state; step durations and final failures
recorded by the worker process and reported by the web's /metrics; the queue depth; the
bearer token; stale metric files dropped when the server starts.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import Client
from django.test.utils import override_settings
from prometheus_client.parser import text_string_to_metric_families

from hooksvc import multiproc
from hooksvc.serving import scrape
from tests.support import capi, servers
from tests.support import workflows as wf
from tests.support.worker import Worker
from tests.workflows.test_worker import wait_for
from workflows.models import Run
from workflows.operators import actions

HOOK = "BeforeClusterUpgrade"
HANDLER = "before-cluster-upgrade"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def get_metrics(server: servers.HookServer, headers: dict[str, str] | None = None) -> Samples:
    conn = server.connection()
    try:
        conn.request("GET", "/metrics", headers=headers or {})
        response = conn.getresponse()
        body = response.read().decode()
        assert response.status == 200, body
        assert response.getheader("Content-Type", "").startswith("text/plain; version=")
        return parse(body)
    finally:
        conn.close()


def call(server: servers.HookServer, cluster: dict[str, Any]) -> dict[str, Any]:
    status, body = server.post(capi.hook_path(HOOK), capi.hook_request(HOOK, cluster))
    assert status == 200, body
    return body


def value(samples: Samples, name: str, **labels: str) -> float:
    """A counter's value, 0 when the scrape has no such series (nothing counted yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def served(samples: Samples, name: str, **labels: str) -> float:
    """A gauge's value, which the scrape must carry (a missing series is no 0)."""
    key = (name, frozenset(labels.items()))
    assert key in samples, f"{name}{labels} is not on /metrics"
    return samples[key]


@pytest.fixture
def own_metrics(
    tls_files: servers.TLSFiles, tmp_path: Path, no_worker: None
) -> Iterator[servers.HookServer]:
    """A web server and a worker counting into a directory of their own, the session's worker
    stopped (it would take the steps and count them elsewhere).

    The session's directory (servers.metrics_dir) is shared by every server and worker the
    session starts (fault stacks' too), and /metrics sums every file in it: a call that any
    of them answered between this test's two scrapes counted as this test's (under load,
    once, 5 calls passed where 1 was expected). Here every value is this test's own."""
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")}
    worker = Worker(tmp_path / "data", tmp_path / "worker.log", env=env)
    worker.start()
    try:
        with servers.hook_server(tls_files.server_dir, tmp_path / "web.log", extra_env=env) as web:
            yield web
    finally:
        worker.stop()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_metrics_count_hook_answers_runs_and_the_workers_steps(
    own_metrics: servers.HookServer,
) -> None:
    hook_server = own_metrics
    wf.template(
        "metrics-gate",
        retryAfterSeconds=1,
        steps=[
            {"name": "approve", "type": "approval"},
            {"name": "after", "type": "noop", "dependsOn": ["approve"]},
        ],
        clusterSelector={"namespaces": ["gated"]},
    )
    # Nothing listens on that port: the http step fails at once, and for good (no budget).
    wf.template(
        "metrics-broken",
        steps=[
            {
                "name": "notify",
                "type": "http",
                "with": {"url": f"http://127.0.0.1:{servers.free_port()}/"},
                "retries": 0,
                "retryForSeconds": 0,
            }
        ],
        clusterSelector={"namespaces": ["broken"]},
    )
    # Nothing else counts in this directory: every value below is this test's.
    assert not [name for name, _ in get_metrics(hook_server) if name.startswith("hooksvc_hook_")]

    gated = capi.cluster_v1beta2(name="m1", namespace="gated", uid="uid-m1")
    broken = capi.cluster_v1beta2(name="m2", namespace="broken", uid="uid-m2")
    first = call(hook_server, gated)
    assert first["retryAfterSeconds"] > 0, first
    assert hook_server.post(capi.hook_path(HOOK), capi.hook_request(HOOK, broken))[0] == 200
    rejected = hook_server.post(capi.hook_path(HOOK), b'{"kind": "nonsense"}')[1]
    assert rejected["status"] == "Failure"

    run = Run.objects.get(template_name="metrics-gate")
    wait_for(
        lambda: run.steps.filter(name="approve", state="waiting").exists(),
        what="the approval step waiting",
    )
    actions.step_approve(run_id=run.pk, step_name="approve", actor="test", reason="go")
    answers = [call(hook_server, gated)]
    while answers[-1]["retryAfterSeconds"] > 0:
        assert len(answers) < 200, f"still {answers[-1]} after the approval"
        time.sleep(0.2)
        answers.append(call(hook_server, gated))
    wait_for(
        lambda: Run.objects.filter(template_name="metrics-broken", state="failed").exists(),
        what="the broken run failing",
    )
    after = get_metrics(hook_server)

    def counted(name: str, **labels: str) -> float:
        return value(after, name, **labels)

    calls = "hooksvc_hook_calls_total"
    blocked = 2 + sum(1 for a in answers if a["retryAfterSeconds"] > 0)  # first, m2, polls
    assert counted(calls, hook=HOOK, handler=HANDLER, answer="blocked") == blocked
    assert counted(calls, hook=HOOK, handler=HANDLER, answer="passed") == 1
    assert counted(calls, hook=HOOK, handler=HANDLER, answer="failed") == 1
    total_calls = 3 + len(answers)
    assert counted("hooksvc_hook_latency_seconds_count", hook=HOOK) == total_calls
    assert counted("hooksvc_hook_latency_seconds_bucket", hook=HOOK, le="+Inf") == total_calls
    assert counted("hooksvc_hook_latency_seconds_sum", hook=HOOK) > 0

    # Runs by template and state: the database now, not a counter.
    assert served(after, "hooksvc_runs", template="metrics-gate", state="succeeded") == 1
    assert served(after, "hooksvc_runs", template="metrics-gate", state="running") == 0
    assert served(after, "hooksvc_runs", template="metrics-broken", state="failed") == 1
    # Every state of a template with runs is reported, zeros included.
    assert served(after, "hooksvc_runs", template="metrics-gate", state="pending") == 0

    # Recorded by the worker's pool processes, reported by the web server.
    assert counted("hooksvc_step_duration_seconds_count", type="approval") >= 1
    assert counted("hooksvc_step_duration_seconds_count", type="noop") >= 1
    assert counted("hooksvc_step_duration_seconds_count", type="http") >= 1
    assert counted("hooksvc_step_failures_total", type="http") == 1
    assert counted("hooksvc_step_failures_total", type="noop") == 0
    # Served (its value against Redis: test_the_queue_depth_is_the_length_of_...): a whole
    # number of messages, which the idle worker keeps near zero.
    depth = served(after, "hooksvc_celery_queue_depth")
    assert depth == int(depth) and depth < 100, depth


@pytest.mark.django_db
def test_metrics_require_the_bearer_token_when_one_is_configured(client: Client) -> None:
    with override_settings(METRICS_TOKEN="s3cret-token"):
        assert client.get("/metrics").status_code == 401
        wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-tokex")
        assert wrong.status_code == 401
        assert wrong["WWW-Authenticate"].startswith("Bearer")
        good = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")
        assert good.status_code == 200
        assert b"# TYPE hooksvc_runs gauge" in good.content
    assert client.get("/metrics").status_code == 200, "no token configured: open"


def test_the_queue_depth_is_the_length_of_the_celery_queue_in_redis() -> None:
    queue = "hooksvc-test-queue-depth"
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(queue)
    client.rpush(queue, "a", "b", "c")
    try:
        families = list(scrape.QueueCollector(settings.CELERY_BROKER_URL, queue=queue).collect())
    finally:
        client.delete(queue)
    assert [(f.name, f.samples[0].value) for f in families] == [("hooksvc_celery_queue_depth", 3)]
    assert list(scrape.QueueCollector("filesystem://").collect()) == []


def test_a_starting_server_drops_metric_files_of_dead_processes_only(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_pid = int(dead.stdout)
    live = tmp_path / f"counter_{os.getpid()}.db"
    stale = tmp_path / f"histogram_{dead_pid}.db"
    live.write_bytes(b"x")
    stale.write_bytes(b"x")
    assert multiproc.wipe_stale(tmp_path) == 1
    assert live.exists() and not stale.exists()


def test_metrics_are_served_on_the_admin_port_only_when_there_is_one(
    tls_files: servers.TLSFiles, tmp_path: Path
) -> None:
    admin_port = servers.free_port()
    env = {"HOOKSVC_ADMIN_PORT": str(admin_port)}
    with servers.hook_server(tls_files.server_dir, tmp_path / "log", extra_env=env) as server:
        for port, expected in ((server.port, 404), (admin_port, 200)):
            conn = http.client.HTTPSConnection(
                server.host, port, context=server.client_context(), timeout=10
            )
            try:
                conn.request("GET", "/metrics")
                assert conn.getresponse().status == expected, port
            finally:
                conn.close()
