"""A Kubernetes step throttled by the API server tries again when the server said, not sooner.

The engine runs the step in this process with its clock held: the API server answers the
step's first call 429 with Retry-After (priority and fairness) or 503 with a Status that
says retryAfterSeconds, and the step's next attempt is due that long after the failure.

Upstream: kube-apiserver's apiserver/pkg/server/filters/priority-and-fairness.go and
maxinflight.go (`tooManyRequests`: 429, Retry-After, a plain-text body); client-go
rest/with_retry.go `checkWait` (429 and any 5xx with Retry-After wait that many seconds)
and apimachinery pkg/api/errors `SuggestsClientDelay` (a Status' retryAfterSeconds).
"""

from __future__ import annotations

import datetime

import pytest

from tests.steps.conftest import NS, start
from tests.support.kube import KubeEmulator
from workflows import clock
from workflows.models import StepRun

pytestmark = pytest.mark.django_db

JOB = {"image": "busybox:1.36", "command": ["true"], "namespace": NS}
HELD = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize("answer", ["throttled", "unavailable"])
def test_the_next_attempt_waits_what_the_api_server_asked(
    kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    monkeypatch.setattr(clock, "now", lambda: HELD)
    if answer == "throttled":
        kube.throttle_next("POST", "/jobs$", retry_after="7")
    else:
        kube.fail_next("POST", "/jobs$", 503, details={"retryAfterSeconds": 7})
    run = start("BeforeClusterUpgrade", [{"name": "job", "type": "k8s_job", "with": JOB}])
    step = StepRun.objects.get(run=run)
    assert (step.state, step.failures) == ("ready", 1)
    assert step.due_at == HELD + datetime.timedelta(seconds=7)
