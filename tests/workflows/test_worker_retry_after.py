"""End to end: CAPI, honouring its hook cache, comes back when the work can be done.

CAPI caches a blocking hook's answer per Cluster and hook and calls again only once its
retryAfterSeconds has run out (kubernetes-sigs/cluster-api util/cache/cache.go,
exp/topology/desiredstate/lifecycle_hooks.go; modelled by tests/support/capi_client.py).
Over HTTPS, against a real Celery worker, Redis and PostgreSQL.
"""

from __future__ import annotations

import pytest

from tests.support import capi_client, servers
from tests.support import workflows as wf
from tests.support.worker import Worker
from workflows.models import Run

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
        done = capi_client.drive(capi_client.Controller(transport), [cluster], timeout=60)

    answers = cluster.records[0].answers
    assert done, f"the lifecycle did not move on within 60 s: {answers}"
    assert answers[0] == 1, f"a new run is due to start at once: {answers}"
    assert any(2 <= a <= 4 for a in answers), f"the wait's remaining seconds, not 30: {answers}"
    assert max(answers) < 30 and answers[-1] == 0, answers
    run = Run.objects.get()
    assert run.state == "succeeded"
    released = cluster.records[0].released
    assert released is not None and run.finished_at is not None
