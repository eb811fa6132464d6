"""Canary waves end to end: a fleet through the CAPI client over HTTPS, a real Celery
worker, Redis and PostgreSQL. Two canaries pass, a third fails its checks: the main wave
halts, saying which canary and workflow failed, until an operator resumes the rollout.

CAPI calls AfterClusterUpgrade once a Cluster's upgrade is done and BeforeClusterUpgrade
before one starts, each until it answers retryAfterSeconds 0 (kubernetes-sigs/cluster-api
exp/topology/desiredstate/lifecycle_hooks.go; modelled by tests/support/capi_client.py).
"""

from __future__ import annotations

import time

import pytest
from django.core.management import call_command

from tests.support import capi, capi_client, servers
from tests.support.worker import Worker
from tests.workflows import rollouts
from workflows.models import Run
from workflows.rollout_actions import RolloutAction

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _steps(*hooks: str) -> list[capi_client.HookStep]:
    return [s for s in capi_client.lifecycle() if s.hook in hooks]


def _cluster(name: str, *hooks: str, **labels: str) -> capi_client.Cluster:
    return capi_client.Cluster(name, "fleet", f"uid-{name}", _steps(*hooks), labels=labels)


def _until(what: str, timeout: float, **filters: object) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.filter(**filters).first()
        if run is not None:
            return run
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


def test_a_failed_canary_halts_the_main_wave_until_an_operator_resumes(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    rollouts.templates()
    upgrade = ("BeforeClusterUpgrade", "AfterClusterUpgrade")
    canaries = [_cluster(f"canary-{n}", *upgrade, ring="canary") for n in (1, 2)]
    bad = _cluster("canary-3", "AfterClusterUpgrade", ring="canary", health="bad")
    main = [_cluster(f"main-{n}", "BeforeClusterUpgrade", ring="main") for n in (1, 2)]
    with capi_client.HTTPSTransport(
        hook_server.host, hook_server.port, hook_server.ca_file
    ) as transport:
        controller = capi_client.Controller(transport, clock=time.time)
        assert capi_client.drive(controller, canaries, timeout=60), "the canaries upgrade"
        path = capi.hook_path("AfterClusterUpgrade")
        transport.post(path, bad.body(bad.steps[0]))
        failed = _until("canary-3's checks fail", 30, template_name="canary-health", state="failed")

        before = capi.hook_path("BeforeClusterUpgrade")
        for cluster in main:
            transport.post(before, cluster.body(cluster.steps[0]))
        _until(
            "the main wave halts", 30, message__contains="halts the rollout", cluster_name="main-2"
        )
        reply = transport.post(before, main[1].body(main[1].steps[0]))
        assert reply.status == "Success" and reply.retry_after > 0, reply
        assert reply.message.startswith(
            "workflow wave-main halts the rollout to v1.33.0: canary fleet/canary-3 failed "
            f"workflow canary-health (run {failed.pk}); resume it with `"
        ), reply.message

        call_command(
            "workflows", "rollout", "resume", "v1.33.0", "--reason", "canary-3's disk failed",
            "--actor", "ops:ann",
        )  # fmt: skip
        assert capi_client.drive(controller, main, timeout=60), [c.records[0].answers for c in main]
    assert set(Run.objects.filter(template_name="wave-main").values_list("state", flat=True)) == {
        "succeeded"
    }
    rollouts.drained()
    action = RolloutAction.objects.get()
    assert (action.kind, action.version, action.runs, action.actor) == (
        "resume",
        "v1.33.0",
        [failed.pk],
        "ops:ann",
    )
