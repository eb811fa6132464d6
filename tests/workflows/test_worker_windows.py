"""A `window` step end to end: over HTTPS, a real Celery worker, Redis and PostgreSQL.

The worker's clock is the machine's, so these windows are laid around the real time: one
open all week, one that excludes today and tomorrow (UTC). The held-clock cases (DST, a
window across midnight, an edit taking effect) are tests/workflows/test_windows.py's.
"""

from __future__ import annotations

import datetime
import time

import pytest

from tests.support import capi, capi_client, servers
from tests.support import workflows as wf
from tests.support.worker import Worker
from workflows.models import Run, StepRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _window(**fields: object) -> list[dict[str, object]]:
    every_day = {"days": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]}
    weekly = [{**every_day, "start": "00:00", "end": "00:00"}]
    params = {"timeZone": "UTC", "weekly": weekly, **fields}
    return [{"name": "window", "type": "window", "with": params}]


def _upgrade() -> capi_client.HookStep:
    return next(s for s in capi_client.lifecycle() if s.hook == "BeforeClusterUpgrade")


def test_inside_a_window_the_upgrade_goes_ahead(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    wf.template("upgrade-window", steps=_window(), retryAfterSeconds=30)
    cluster = capi_client.Cluster("prod-eu-1", "fleet", "uid-window-open", [_upgrade()])
    with capi_client.HTTPSTransport(
        hook_server.host, hook_server.port, hook_server.ca_file
    ) as transport:
        done = capi_client.drive(capi_client.Controller(transport), [cluster], timeout=60)
    assert done, cluster.records[0].answers
    step = StepRun.objects.get()
    assert (step.state, Run.objects.get().state) == ("succeeded", "succeeded")
    assert step.output["openedAt"] and step.output["closesAt"]


def test_outside_a_window_the_hook_holds_and_says_when_it_opens(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    today = datetime.datetime.now(datetime.UTC).date()
    days = [today + datetime.timedelta(days=n) for n in range(3)]
    wf.template(
        "upgrade-window",
        steps=_window(exclude=[d.isoformat() for d in days[:2]]),
        retryAfterSeconds=3600,
    )
    step = _upgrade()
    cluster = capi_client.Cluster("prod-eu-1", "fleet", "uid-window-closed", [step])
    with capi_client.HTTPSTransport(
        hook_server.host, hook_server.port, hook_server.ca_file
    ) as transport:
        path = capi.hook_path(step.hook)
        transport.post(path, cluster.body(step))
        _until_waiting(timeout=30)
        reply = transport.post(path, cluster.body(step))
    opens = days[2].strftime("%a")
    assert reply.status == "Success"
    assert reply.message == (
        f"workflow upgrade-window waits for the maintenance window {opens} 00:00 UTC at step window"
    )
    assert 290 <= reply.retry_after <= 310, (
        f"a day away, but CAPI comes back within five minutes: {reply.retry_after}"
    )
    assert Run.objects.get().state == "running"


def _until_waiting(timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Run.objects.filter(message__contains="waits for the maintenance window").exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"the worker did not poll the window within {timeout} s")
