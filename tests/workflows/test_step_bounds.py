"""Timeouts that bite (issue 22): a step's code is stopped at its bound whether it returns or not.

Covers: a call that does not return by its step's deadline fails the step for good ("timed
out after N s") and its cleanup is sent; one that does not return by its call's bound
before the deadline is a temporary error that the error budget judges; the thread of a call
given up on is asked to stop (a Python loop stops) and never records an outcome; a thread
stuck in C is counted (the gauge) while it lives; an inline step runs on the calling thread;
no write extends a running step's lease. Through a real worker, with the prefork pool (the
image's) and the threads pool (`make run`) and one slot each: a step that hangs with
`timeoutSeconds` fails at that time, and the worker's slot then serves the next step.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection
from django.test import override_settings

from tests.support import capi
from tests.support import workflows as wf
from tests.support.worker import Worker, wait_for
from tests.workflows.steps_for_tests import HANG_CALL_SECONDS, PREFIX
from workflows import clock
from workflows.engine import attempts, calls, scheduling
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, StepRun

# Step threads have their own connections: they see only committed rows.
pytestmark = pytest.mark.django_db(transaction=True)


def _run(steps: list[dict[str, Any]], cluster: str = "c1", name: str = "bounded") -> Run:
    template = wf.template(name, steps=steps)
    call = wf.call(cluster=capi.cluster_v1beta2(name=cluster, uid=f"uid-{cluster}"))
    [run] = hook_runs.runs_ensure(templates=[template], call=call)
    return run


def _count(r: redis.Redis, kind: str, run: Run, step: str) -> int:
    return int(r.get(f"{PREFIX}:{kind}:hooksvc-{run.pk}-{step}") or 0)


# --- In process -----------------------------------------------------------------------------


def test_a_call_past_its_steps_deadline_fails_the_step_and_its_thread_is_stopped(
    clean_redis: redis.Redis, sent: list[tuple[str, Any]]
) -> None:
    # The deadline (1 s) comes before the call's bound (HANG_CALL_SECONDS): it decides.
    run = _run([{"name": "stuck", "type": "hang", "timeoutSeconds": 1}])

    scheduling.advance(run.pk)

    step = StepRun.objects.get(run=run)
    assert (step.state, step.message) == ("failed", "timed out after 1 s")
    assert Run.objects.get(pk=run.pk).state == "failed"
    assert ("step_cleanup", step.pk) in sent, "what the step made is cleaned up"
    wait_for(lambda: _count(clean_redis, "stopped", run, "stuck") == 1, what="the stop")
    assert _count(clean_redis, "returned", run, "stuck") == 0


def test_a_call_past_its_bound_before_the_deadline_is_a_temporary_error_the_budget_judges(
    clean_redis: redis.Redis, sent: list[tuple[str, Any]], now: list[Any]
) -> None:
    steps = [
        {"name": "stuck", "type": "hang", "timeoutSeconds": 0, "retries": 1, "retryForSeconds": 0}
    ]
    run = _run(steps)

    scheduling.advance(run.pk)

    step = StepRun.objects.get(run=run)
    message = f"the step's code did not return within {HANG_CALL_SECONDS} s"
    assert (step.state, step.failures, step.message) == ("ready", 1, message)
    assert Run.objects.get(pk=run.pk).state == "running"
    assert step.due_at is not None
    now[0] = step.due_at
    scheduling.run_step(step.pk)  # the second hang in a row: past retries and retryForSeconds
    step.refresh_from_db()
    assert (step.state, step.failures, step.message) == ("failed", 2, message)
    wait_for(lambda: _count(clean_redis, "stopped", run, "stuck") == 2, what="both stops")


def test_a_thread_stuck_in_c_is_counted_while_it_lives(
    clean_redis: redis.Redis, sent: list[tuple[str, Any]]
) -> None:
    before = calls.abandoned()
    run = _run([{"name": "stuck", "type": "hang", "with": {"inC": True}, "retries": 0}])

    scheduling.advance(run.pk)

    assert StepRun.objects.get(run=run).state == "ready", "a temporary error, retried later"
    assert calls.abandoned() == before + 1, "its thread still waits in C"
    assert _count(clean_redis, "stopped", run, "stuck") == 0


def test_an_inline_step_runs_on_the_calling_thread(
    monkeypatch: pytest.MonkeyPatch, no_worker: None
) -> None:
    # No worker: its reconciler would advance the new (committed) run first now and then.
    seen: list[threading.Thread] = []
    execute_once = attempts.execute_once

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread())
        return execute_once(*args, **kwargs)

    monkeypatch.setattr(attempts, "execute_once", spy)
    steps: list[dict[str, Any]] = [
        {"name": "n", "type": "noop"},
        {"name": "t", "type": "tracked", "dependsOn": ["n"]},
    ]
    run = _run(steps)
    scheduling.advance(run.pk)
    assert Run.objects.get(pk=run.pk).state == "succeeded"
    assert seen[0] is threading.current_thread(), "noop: inline"
    assert seen[1] is not threading.current_thread(), "tracked: on a step thread"


def _xmin(step_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text::bigint FROM workflows_steprun WHERE id = %s", [step_id])
        return int(cursor.fetchone()[0])


@override_settings(STEP_LEASE_SECONDS=0.3)
def test_no_write_extends_a_running_steps_lease(clean_redis: redis.Redis) -> None:
    """A lease lasts its call's bound and its own length: while the step's code runs (1.5 s,
    five times the lease's own 0.3 s), nothing writes to the step's row. The heartbeat used
    to extend it every third of its length, one write per step every 20 s by default."""
    run = _run([{"name": "slow", "type": "record", "with": {"seconds": 1.5}}])
    [attempt] = scheduling._schedule(run.pk, [])  # the run starts: its step is claimed
    claimed = _xmin(attempt.step.pk)

    result = attempts.run(attempt)

    assert result.result.outcome is not None and not isinstance(result.result.outcome, Exception)
    assert _xmin(attempt.step.pk) == claimed, "the step's row was written while its code ran"
    assert attempt.step.lease_expires_at is not None
    assert attempt.step.lease_expires_at > clock.now(), "the lease covers the call's bound"


# --- Through a real worker, one slot ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_hanging_step_fails_at_its_timeout_and_the_slot_serves_the_next_step(
    pool: str, no_worker: None, tmp_path: Path, clean_redis: redis.Redis
) -> None:
    worker = Worker(tmp_path / "data", tmp_path / "worker.log", concurrency=1, pool=pool)
    worker.start()
    try:
        stuck = _run([{"name": "stuck", "type": "hang", "timeoutSeconds": 1}], "c1", "stuck")
        wait_for(lambda: _count(clean_redis, "calls", stuck, "stuck") == 1, what="the hang")
        after = _run([{"name": "next", "type": "record"}], "c2", "after")
        wait_for(
            lambda: Run.objects.get(pk=after.pk).state in Run.FINISHED,
            what="the next run, on the only slot",
        )
    finally:
        worker.stop()
    step = StepRun.objects.get(run=stuck)
    assert (step.state, step.message) == ("failed", "timed out after 1 s")
    assert step.started_at is not None and step.finished_at is not None
    assert (step.finished_at - step.started_at).total_seconds() >= 1, "not before its timeout"
    assert Run.objects.get(pk=after.pk).state == "succeeded"
    assert _count(clean_redis, "stopped", stuck, "stuck") == 1
