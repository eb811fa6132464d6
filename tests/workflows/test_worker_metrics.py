"""In Kubernetes each worker serves its own /metrics: web Pods cannot read its samples."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest

import hooksvc
from tests.support import servers
from tests.support import workflows as wf
from tests.support.worker import Worker
from workflows.hookpath import answers
from workflows.models import Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_worker_serves_its_step_metrics_on_its_own_port(no_worker: None, tmp_path: Path) -> None:
    port = servers.free_port()
    # Its own metric files: in the session's directory, a noop counted by any earlier worker
    # would be served too.
    env = {
        "HOOKSVC_WORKER_METRICS_PORT": str(port),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
    }
    worker = Worker(tmp_path / "data", tmp_path / "worker.log", env=env)
    worker.start()
    try:
        wf.template("backup", steps=[{"name": "only", "type": "noop"}])
        answers.answer(wf.call(), handler_name="test")
        deadline = time.monotonic() + 30
        while Run.objects.get().state != "succeeded":
            assert time.monotonic() < deadline, "the run did not finish"
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    finally:
        worker.stop()
    assert 'hooksvc_step_duration_seconds_count{type="noop"} 1.0' in text.splitlines()
    # Which build each worker runs, as a rollout replaces them (hooksvc.build).
    assert f'version="{hooksvc.__version__}"' in text
