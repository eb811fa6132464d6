"""How late the engine is as a whole: its oldest due work that nobody is doing.

A hook call answers from it (workflows.hookpath.retry.engine_behind), read once a second
per web process (workflows.hookpath.backlog).
"""

from __future__ import annotations

import datetime

import pytest

from tests.support import workflows as wf
from workflows import clock
from workflows.engine import scheduling
from workflows.hookpath import answers, backlog
from workflows.models import Run, StepRun

pytestmark = pytest.mark.django_db


def ago(seconds: float) -> datetime.datetime:
    return clock.now() - datetime.timedelta(seconds=seconds)


def test_a_run_due_to_start_and_a_due_step_no_attempt_holds_make_the_engine_late(
    sent: list[tuple[str, object]],
) -> None:
    wf.template("settle", steps=[{"name": "pause", "type": "wait", "with": {"seconds": 30}}])
    assert backlog.read() == 0.0, "nothing due"
    answers.answer(wf.call(), handler_name="test")
    Run.objects.update(wake_at=ago(20))
    assert 20 <= backlog.read() < 25, "a run due to start 20 s ago and not started"

    scheduling.advance(Run.objects.get().pk)
    assert backlog.read() == 0.0, "started; its wait is due in 30 s"
    StepRun.objects.update(due_at=ago(10))
    assert 10 <= backlog.read() < 15, "its poll is 10 s overdue"
    StepRun.objects.update(lease_owner="worker-1", lease_expires_at=ago(-60))
    assert backlog.read() == 0.0, "an attempt holds it: being done, not waiting"
    assert backlog.late() == 0.0, "late() is the last read"
