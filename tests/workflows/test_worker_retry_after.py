"""End to end: CAPI, honouring its hook cache, comes back when the work can be done.

CAPI caches a blocking hook's answer per Cluster and hook and calls again only once its
retryAfterSeconds has run out (kubernetes-sigs/cluster-api util/cache/cache.go,
exp/topology/desiredstate/lifecycle_hooks.go; modelled by tests/support/capi_client.py).
Over HTTPS, against a real Celery worker, Redis and PostgreSQL.
"""

from __future__ import annotations

import datetime
import time

import pytest

from tests.support import capi, capi_client, servers
from tests.support import workflows as wf
from tests.support.worker import Worker
from workflows.models import HookCall, Run, StepRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_three_second_wait_is_answered_with_about_three_seconds_not_thirty(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    wf.template(
        "settle",
        steps=[{"name": "pause", "type": "wait", "with": {"seconds": 3}}],
        retryAfterSeconds=30,
    )
    step = next(s for s in capi_client.lifecycle() if s.hook == "BeforeClusterUpgrade")
    cluster = capi_client.Cluster("prod-eu-1", "fleet", "uid-retry-after", [step])
    with capi_client.HTTPSTransport(
        hook_server.host, hook_server.port, hook_server.ca_file
    ) as transport:
        controller = capi_client.Controller(transport, clock=time.time)
        done = capi_client.drive(controller, [cluster], timeout=60)

    answers = cluster.records[0].answers
    assert done, f"the lifecycle did not move on within 60 s: {answers}"
    assert any(1 <= a <= 4 for a in answers), f"the wait's remaining seconds, not 30: {answers}"
    assert max(answers) < 30 and answers[-1] == 0, answers
    # A new run cannot succeed before it has started (now at the earliest) and waited 3 s:
    # it answers that, rounded down, and the call that comes at or just before the wait's
    # end is held until the run succeeded. Two calls, three if the worker started the run
    # more than the linger window (1 s) late.
    assert answers[0] == 3, f"a new run answers its template's least time: {answers}"
    assert len(answers) <= 3, answers
    run = Run.objects.get()
    assert run.state == "succeeded"
    released = cluster.records[0].released
    assert released is not None and run.finished_at is not None
    assert run.finished_at.timestamp() <= released, "let go only once the run had succeeded"


def test_a_call_that_comes_just_before_the_wait_ends_is_held_until_the_run_succeeded(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    """retryAfterSeconds is whole seconds (an int32: cluster-api api/runtime/hooks/v1alpha1/
    common_types.go), so hooksvc rounds the wait down and holds the call that comes just
    before the run's end until the engine has recorded it (HOOKSVC_HOOK_LINGER_SECONDS,
    1 s by default): that call lets go, sent before the run ended and answered after."""
    wf.template(
        "settle",
        steps=[{"name": "pause", "type": "wait", "with": {"seconds": 3}}],
        retryAfterSeconds=30,
    )
    step = next(s for s in capi_client.lifecycle() if s.hook == "BeforeClusterUpgrade")
    cluster = capi_client.Cluster("prod-eu-1", "fleet", "uid-linger", [step])
    with capi_client.HTTPSTransport(
        hook_server.host, hook_server.port, hook_server.ca_file
    ) as transport:
        path = capi.hook_path(step.hook)
        first = transport.post(path, cluster.body(step))
        assert (first.status, first.retry_after, first.held_ms) == ("Success", 3, 0.0), (
            "a new run answers at once, with the wait it cannot succeed before (rounded down)"
        )
        due_at = _wait_due(timeout=30)
        # CAPI's next call, a little before the wait ends (as the rounded-down answer sends it).
        time.sleep(max(0.0, due_at.timestamp() - 0.3 - time.time()))
        sent = time.time()
        last = transport.post(path, cluster.body(step))
        returned = time.time()

    run = Run.objects.get()
    assert last.retry_after == 0 and last.status == "Success", last
    assert run.state == "succeeded" and run.finished_at is not None
    assert sent < run.finished_at.timestamp() <= returned, (
        "the call was sent before the run ended and let go only once it had"
    )
    assert last.held_ms > 0, "hooksvc says it held the call (Server-Timing: linger)"
    assert HookCall.objects.count() == 2, "two calls: the one that started it, the one let go"


def _wait_due(timeout: float) -> datetime.datetime:
    """The wait step's end, once the worker has started the run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # Waiting: a step created ready is due at once, before the worker sets the wait's end.
        step = StepRun.objects.filter(state=StepRun.State.WAITING, due_at__isnull=False).first()
        if step is not None and step.due_at is not None:
            return step.due_at
        time.sleep(0.05)
    raise AssertionError(f"the worker did not start the run within {timeout} s")
