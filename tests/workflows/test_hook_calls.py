"""Every answered hook call is recorded, shown on its run's page, and pruned after the retention."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tests.support import capi, servers
from tests.support import workflows as wf
from workflows.hookpath import hookcalls
from workflows.models import HookCall, Run


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_answered_call_is_recorded_with_its_answer_and_latency(
    tls_files: servers.TLSFiles, tmp_path: Path
) -> None:
    wf.template("backup", retryAfterSeconds=15)
    # The production default: records buffered and written by the background thread.
    with servers.hook_server(tls_files.server_dir, tmp_path / "gunicorn.log") as server:
        server.post(
            capi.hook_path("BeforeClusterUpgrade"), capi.hook_request("BeforeClusterUpgrade")
        )
        server.post(capi.hook_path("BeforeClusterUpgrade"), b"{")
        call = _first_record()
    assert (call.hook, call.handler, call.cluster_namespace, call.cluster_name, call.moment) == (
        "BeforeClusterUpgrade",
        "before-cluster-upgrade",
        "fleet",
        "prod-eu-1",
        "v1.33.0",
    )
    assert (call.status, call.retry_after, call.message) == (
        "Success",
        1,  # the new run is due to start at once
        "workflow backup is starting",
    )
    assert call.latency_ms > 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_stopping_server_writes_the_records_it_still_buffers(
    tls_files: servers.TLSFiles, tmp_path: Path
) -> None:
    wf.template("backup")
    # An hour between writes: only the worker's exit can write this record.
    env = {"HOOKSVC_HOOK_CALL_FLUSH_SECONDS": "3600"}
    with servers.hook_server(tls_files.server_dir, tmp_path / "gunicorn.log", extra_env=env) as s:
        status, _ = s.post(
            capi.hook_path("BeforeClusterUpgrade"), capi.hook_request("BeforeClusterUpgrade")
        )
        assert status == 200
        assert HookCall.objects.count() == 0, "the record was written before the interval"
    assert HookCall.objects.get().cluster_name == "prod-eu-1"


@pytest.mark.django_db
def test_buffered_records_wait_for_the_flush_and_are_written_in_one_copy(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.HOOK_CALL_FLUSH_SECONDS = 1
    monkeypatch.setattr(hookcalls, "background", False)
    for n in range(3):
        hookcalls.record(
            call=wf.call(),
            handler="h",
            status="Success",
            message=f"{n}",
            retry_after=10,
            latency_ms=1,
        )
    assert HookCall.objects.count() == 0
    with CaptureQueriesContext(connection) as ctx:
        assert hookcalls.flush() == 3
    writes = [q["sql"].split(" (")[0] for q in ctx.captured_queries if "hookcall" in q["sql"]]
    assert writes == ["COPY workflows_hookcall"]
    assert sorted(HookCall.objects.values_list("message", flat=True)) == ["0", "1", "2"]
    assert hookcalls.flush() == 0


def _record(message: str) -> None:
    hookcalls.record(
        call=wf.call(), handler="h", status="Success", message=message, retry_after=10, latency_ms=1
    )


@pytest.mark.django_db
def test_records_a_failed_write_could_not_store_wait_for_the_next_one(
    settings: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings.HOOK_CALL_FLUSH_SECONDS = 1
    monkeypatch.setattr(hookcalls, "background", False)
    monkeypatch.setattr(hookcalls, "MAX_BUFFERED", 2)
    for n in range(3):
        _record(f"{n}")
    write = hookcalls._write

    def store_down(rows: list[HookCall]) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(hookcalls, "_write", store_down)
    assert hookcalls.flush() == 0
    monkeypatch.setattr(hookcalls, "_write", write)
    assert hookcalls.flush() == 2
    assert sorted(HookCall.objects.values_list("message", flat=True)) == ["0", "1"]
    dropped = [r for r in caplog.records if getattr(r, "action", "") == "hook_records_dropped"]
    assert [getattr(r, "count", None) for r in dropped] == [1]


def _first_record() -> HookCall:
    """The server writes its buffered records every 0.2 s: wait for the first."""
    deadline = time.monotonic() + 30
    while not HookCall.objects.exists():
        assert time.monotonic() < deadline, "the server wrote no hook call record within 30 s"
        time.sleep(0.1)
    return HookCall.objects.get()


@pytest.mark.django_db
def test_a_runs_page_lists_the_calls_that_asked_about_it(admin_client: Client) -> None:
    wf.template("backup")
    hookcalls.record(
        call=wf.call(),
        handler="before-cluster-upgrade",
        status="Success",
        message="workflow backup is running step snapshot",
        retry_after=10,
        latency_ms=1.5,
    )
    run = Run.objects.create(
        template_name="backup",
        template_generation=1,
        spec=wf.spec(),
        hook="BeforeClusterUpgrade",
        cluster_key="6f0c2a4e-2d7b-4c61-9a1e-0f5c1d2e3a4b",
        cluster_namespace="fleet",
        cluster_name="prod-eu-1",
        moment="v1.33.0",
    )
    page = admin_client.get(reverse("admin:workflows_run_change", args=[run.pk])).content.decode()
    assert "workflow backup is running step snapshot" in page
    assert "1.5 ms" in page


@pytest.mark.django_db
def test_prune_deletes_only_calls_older_than_the_retention(settings: Any) -> None:
    settings.HOOK_CALL_RETENTION_DAYS = 7
    for age in (1, 6, 8, 30):
        hookcalls.record(
            call=wf.call(),
            handler="h",
            status="Success",
            message=f"{age}",
            retry_after=0,
            latency_ms=1,
        )
        HookCall.objects.filter(message=f"{age}").update(
            at=timezone.now() - datetime.timedelta(days=age)
        )
    assert hookcalls.prune(batch=1) == 2
    assert sorted(HookCall.objects.values_list("message", flat=True)) == ["1", "6"]
