"""Hook answers when a dependency is down: never a 5xx, never a premature proceed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import capi, servers
from tests.support import workflows as wf
from workflows.engine import reconciler
from workflows.models import Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_unreachable_state_store_keeps_blocking_hooks_holding(
    tls_files: servers.TLSFiles, tmp_path: Path
) -> None:
    dead = f"postgres://postgres@127.0.0.1:{servers.free_port()}/hooksvc"
    with servers.hook_server(
        tls_files.server_dir, tmp_path / "log", extra_env={"DATABASE_URL": dead}
    ) as server:
        blocking = server.post(
            capi.hook_path("BeforeClusterDelete"), capi.hook_request("BeforeClusterDelete")
        )
        initialized = server.post(
            capi.hook_path("AfterControlPlaneInitialized"),
            capi.hook_request("AfterControlPlaneInitialized"),
        )
    message = "hooksvc state store is unavailable; holding until it answers"
    assert blocking == (
        200,
        {
            "apiVersion": capi.API_VERSION,
            "kind": "BeforeClusterDeleteResponse",
            "status": "Success",
            "message": message,
            "retryAfterSeconds": 10,
        },
    )
    # The non-blocking hook cannot hold; Failure makes CAPI call it again later.
    assert initialized == (
        200,
        {
            "apiVersion": capi.API_VERSION,
            "kind": "AfterControlPlaneInitializedResponse",
            "status": "Failure",
            "message": message,
        },
    )


def test_an_unreachable_broker_still_records_the_run_for_the_reconciler(
    tls_files: servers.TLSFiles, tmp_path: Path, no_worker: None
) -> None:
    wf.template("backup")
    dead = f"redis://127.0.0.1:{servers.free_port()}/0"
    env = {"CELERY_BROKER_URL": dead}
    with servers.hook_server(tls_files.server_dir, tmp_path / "log", extra_env=env) as server:
        status, body = server.post(
            capi.hook_path("BeforeClusterUpgrade"), capi.hook_request("BeforeClusterUpgrade")
        )
        log = server.log()
    assert (status, body["status"], body["retryAfterSeconds"]) == (200, "Success", 1)
    run = Run.objects.get()
    assert run.state == "pending"
    assert "broker unavailable; the reconciler will start the run" in log
    # With the broker back, the reconciler enqueues the run that was never announced.
    assert reconciler.reconcile().runs == 1


BAD: list[Any] = [
    b"{",
    {**capi.hook_request("BeforeClusterUpgrade"), "kind": "BeforeClusterCreateRequest"},
    {
        k: v
        for k, v in capi.hook_request("BeforeClusterUpgrade").items()
        if k != "toKubernetesVersion"
    },
]


@pytest.mark.parametrize("body", BAD, ids=["invalid-json", "wrong-kind", "missing-version"])
def test_a_rejected_request_writes_nothing(hook_server: servers.HookServer, body: Any) -> None:
    wf.template("backup")
    status, answer = hook_server.post(capi.hook_path("BeforeClusterUpgrade"), body)
    assert (status, answer["status"]) == (200, "Failure")
    assert Run.objects.count() == 0
