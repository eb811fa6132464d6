"""Lock order: whoever holds a run's lock never waits for a step a worker is executing.

A worker executing a step holds the step's row lock and takes its run's lock to record a
finish. An operator action or the deadline holds the run's lock first; if it then waited
for that step, PostgreSQL would abort one of the two as a deadlock. Here another
connection holds a step's lock, as a worker mid-step does.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from tests.support import capi
from tests.support import workflows as wf
from tests.workflows import runs
from workflows import actions, engine
from workflows.models import Run, StepRun

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker_holding() -> Iterator[psycopg.Connection]:
    """A second connection, standing for a worker in the middle of a step."""
    params = connection.get_connection_params()
    with psycopg.connect(
        dbname=params["dbname"], host=params["host"], port=params["port"], user=params["user"]
    ) as other:
        yield other


@pytest.fixture(autouse=True)
def _no_endless_wait() -> Iterator[None]:
    """Were the lock waited for, the test fails after a while instead of hanging."""
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '3s'")
    yield
    with connection.cursor() as cursor:
        cursor.execute("RESET lock_timeout")


def _hold(other: psycopg.Connection, step: StepRun) -> None:
    other.execute("SELECT 1 FROM workflows_steprun WHERE id = %s FOR UPDATE", [step.pk])


def test_cancel_refuses_while_a_step_is_executing_and_changes_nothing(
    worker_holding: psycopg.Connection,
) -> None:
    run = runs.make_run(steps=(("backup", "noop", "running"),))
    step = run.steps.get()
    _hold(worker_holding, step)

    with pytest.raises(actions.ActionError, match="a step is executing right now"):
        actions.run_cancel(run_id=run.pk, actor="ops:ann", reason="wrong version")

    assert Run.objects.get(pk=run.pk).state == "running"
    assert StepRun.objects.get(pk=step.pk).state == "running"
    worker_holding.rollback()
    actions.run_cancel(run_id=run.pk, actor="ops:ann", reason="wrong version")
    assert Run.objects.get(pk=run.pk).state == "cancelled"


def test_skip_refuses_while_that_step_is_executing(worker_holding: psycopg.Connection) -> None:
    run = runs.make_run(steps=(("backup", "noop", "running"),))
    _hold(worker_holding, run.steps.get())
    with pytest.raises(actions.ActionError, match="try again in a few seconds"):
        actions.step_skip(run_id=run.pk, step_name="backup", actor="ops:ann", reason="done by hand")


def test_a_failing_deadline_waits_for_an_executing_step_then_acts(
    worker_holding: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = wf.template(
        "timer",
        steps=[{"name": "w", "type": "wait", "with": {"seconds": 3600}}],
        deadlineSeconds=60,
        onDeadline="Fail",
    )
    call = wf.call(cluster=capi.cluster_v1beta2(name="c1", uid="uid-c1"))
    [run] = engine.runs_ensure(templates=[template], call=call)
    engine.advance(run.pk)
    later = engine.clock() + datetime.timedelta(seconds=61)
    monkeypatch.setattr(engine, "clock", lambda: later)
    _hold(worker_holding, StepRun.objects.get(run=run))

    engine.advance(run.pk)

    run.refresh_from_db()
    assert (run.state, run.deadline_exceeded) == ("running", False)
    assert run.wake_at == run.deadline_at  # still due: the reconciler brings it back
    worker_holding.rollback()
    engine.advance(run.pk)
    run.refresh_from_db()
    assert (run.state, run.deadline_exceeded) == ("failed", True)
    assert StepRun.objects.get(run=run).state == "cancelled"
