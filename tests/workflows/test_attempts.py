"""One attempt path: claim a step by lease, run its code with no transaction open, record by lease.

Covers: a step's code runs with no transaction open and no lock held on hooksvc's tables,
as PostgreSQL sees it, through a real worker (invariant 8); a lease that passes mid-step:
the step is claimed again, the late outcome is dropped and logged, the next attempt's is
recorded; an outcome after an operator's cancel, approve or skip is dropped (a cancelled
step is cleaned up once more, for what the late attempt may have made); the race of
issue 17, a countdown and a batch poll arriving together for one step, leaves nothing to
the lease; its process' heartbeat keeps a long step while its worker lives.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection

from tests.support import capi
from tests.support import workflows as wf
from tests.support.worker import Worker, wait_for
from tests.workflows.steps_for_tests import PREFIX
from workflows import clock
from workflows.engine import attempts, lifecycle, polls, scheduling, writes
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, StepRun, WorkflowTemplate
from workflows.operators import actions
from workflows.steps import registry

#: A claim's lease lasts its call's bound (a custom type's default) and its own length: the
#: clock moved this far past a claim finds it passed.
LEASE_PASSES = settings.STEP_LEASE_SECONDS + registry.DEFAULT_CALL_TIMEOUT_SECONDS + 1


def _run(template: WorkflowTemplate | str, steps: list[dict[str, Any]], cluster: str = "c1") -> Run:
    tmpl = wf.template(template, steps=steps) if isinstance(template, str) else template
    call = wf.call(cluster=capi.cluster_v1beta2(name=cluster, uid=f"uid-{cluster}"))
    [run] = hook_runs.runs_ensure(templates=[tmpl], call=call)
    return run


def _calls(client: redis.Redis, run: Run, step: str) -> int:
    return int(client.get(f"{PREFIX}:calls:hooksvc-{run.pk}-{step}") or 0)


# --- Invariant 8, through a real worker -----------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_steps_code_runs_with_no_transaction_open_and_no_lock_held(
    worker: Worker, clean_redis: redis.Redis
) -> None:
    # The probe first (claimed when the run starts), after a chain of inline steps (the
    # chain's one-statement path), and beside another (claimed by its own message).
    steps: list[dict[str, Any]] = [
        {"name": "first", "type": "tx_probe"},
        {"name": "n1", "type": "noop", "dependsOn": ["first"]},
        {"name": "n2", "type": "noop", "dependsOn": ["n1"]},
        {"name": "after_chain", "type": "tx_probe", "dependsOn": ["n2"]},
        {"name": "beside", "type": "tx_probe", "dependsOn": ["n2"]},
    ]
    run = _run("probe", steps)
    wait_for(lambda: Run.objects.get(pk=run.pk).state in Run.FINISHED, what="the run to finish")

    assert Run.objects.get(pk=run.pk).state == "succeeded"
    reports = [json.loads(r) for r in clean_redis.lrange(f"{PREFIX}:tx_probe:{run.pk}", 0, -1)]
    assert len(reports) == 3
    for report in reports:
        assert report["in_atomic_block"] is False, report
        # The step's own connection and the attempt's (which claimed the step), at least.
        backends = report["backends"]
        assert len(backends) >= 2 and report["pid"] in {b["pid"] for b in backends}, report
        for backend in backends:
            assert (backend["state"], backend["in_transaction"]) == ("idle", False), report
            assert backend["table_locks"] == 0, report


# --- Leases, in process ---------------------------------------------------------------------


@pytest.mark.django_db
def test_a_lease_that_passes_mid_step_drops_the_late_outcome_and_the_next_attempt_records(
    later: Callable[[float], datetime.datetime], caplog: pytest.LogCaptureFixture
) -> None:
    run = _run("poller", [{"name": "poll", "type": "count_poll", "with": {"every": 2, "polls": 2}}])
    scheduling.advance(run.pk)
    step = StepRun.objects.get(run=run)
    assert step.state == "waiting"
    later(3)
    # The first attempt claims the step and its code runs long: no heartbeat extends the
    # lease here, so it passes (a worker stalled or cut off from PostgreSQL).
    [slow] = attempts.claim(step_ids=[step.pk])
    late = attempts.tried(slow, registry.Done({"attempt": "late"}), {"polls": 2}, at=clock.now())
    assert attempts.claim(step_ids=[step.pk]) == [], "the lease holds the step"
    later(LEASE_PASSES)
    [second] = attempts.claim(step_ids=[step.pk])
    assert second.lease.token == slow.lease.token + 1
    scheduling.advance(run.pk, [attempts.run(second)])
    recorded = StepRun.objects.get(pk=step.pk)
    assert (recorded.state, recorded.output) == ("succeeded", {"polls": 2})

    with caplog.at_level(logging.WARNING, logger="workflows.engine.attempts"):
        scheduling.advance(run.pk, [late])

    assert StepRun.objects.get(pk=step.pk).output == {"polls": 2}, "the late outcome is dropped"
    dropped = [r for r in caplog.records if r.getMessage().startswith("step outcome dropped")]
    assert len(dropped) == 1
    assert (dropped[0].__dict__["claim"], dropped[0].__dict__["step"]) == (slow.lease.token, "poll")
    assert Run.objects.get(pk=run.pk).state == "succeeded"


@pytest.mark.django_db
def test_a_first_poll_whose_lease_passed_is_dropped_on_the_one_statement_path_too(
    later: Callable[[float], datetime.datetime], caplog: pytest.LogCaptureFixture
) -> None:
    """A first poll is written on its step's row alone (writes.Path.ALONE), by the same
    compare-and-set on its lease: once the lease passed and the step was claimed again, the
    late poll is dropped and logged, and the next attempt's is recorded."""
    run = _run("poller", [{"name": "poll", "type": "count_poll", "with": {"every": 2, "polls": 2}}])
    [first] = scheduling._schedule(run.pk, [])  # the run starts: its step is claimed
    late = attempts.run(first)
    write = lifecycle.after(late.result)
    assert lifecycle.route(write, late.result).path is writes.Path.ALONE
    later(LEASE_PASSES)
    [second] = attempts.claim(step_ids=[first.step.pk])

    with caplog.at_level(logging.WARNING, logger="workflows.engine.attempts"):
        scheduling.advance(run.pk, [late])

    step = StepRun.objects.get(pk=first.step.pk)
    assert (step.state, step.claims) == ("ready", second.lease.token), (
        "the late poll is not written"
    )
    dropped = [r for r in caplog.records if r.getMessage().startswith("step outcome dropped")]
    assert [r.__dict__["claim"] for r in dropped] == [first.lease.token]
    scheduling.advance(run.pk, [attempts.run(second)])
    step.refresh_from_db()
    assert (step.state, step.lease_owner) == ("waiting", "")


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["cancel", "skip", "approve"])
def test_an_outcome_after_an_operators_move_is_dropped(
    action: str,
    later: Callable[[float], datetime.datetime],
    sent: list[tuple[str, Any]],
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    if action == "approve":
        run = _run("gate", [{"name": "s", "type": "approval"}])
        scheduling.advance(run.pk)  # waiting for approval, polled again in 300 s
        later(301)
        [attempt] = attempts.claim(step_ids=[StepRun.objects.get(run=run).pk])
        outcome: registry.Outcome = registry.Poll(after=300, message="still no approval")
    else:
        run = _run("gate", [{"name": "s", "type": "tracked"}])
        # The run starts and its step is claimed; the attempt's code is still running.
        [attempt] = scheduling._schedule(run.pk, [])
        outcome = registry.Done({"late": True})
    result = attempts.tried(attempt, outcome, {}, at=clock.now())
    # The attempt holds no lock: the action never waits for the step's code.
    if action == "cancel":
        actions.run_cancel(run_id=run.pk, actor="ann", reason="window closed")
    elif action == "skip":
        actions.step_skip(run_id=run.pk, step_name="s", actor="ann", reason="done by hand")
    else:
        actions.step_approve(run_id=run.pk, step_name="s", actor="ann", reason="looks good")
    moved = StepRun.objects.get(run=run)
    sent.clear()

    with (
        caplog.at_level(logging.WARNING, logger="workflows.engine.attempts"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        if result.repeats:
            assert attempts.record_repeats([result]) == set()
        else:
            scheduling.advance(run.pk, [result])

    after = StepRun.objects.get(run=run)
    assert (after.state, after.output, after.memo) == (moved.state, moved.output, moved.memo)
    assert any(r.getMessage().startswith("step outcome dropped") for r in caplog.records)
    if action == "cancel":
        # The late attempt may have made something after the cancel's cleanup: once more.
        assert ("step_cleanup", after.pk) in sent
    if action == "approve":
        assert after.memo["approved_by"] == "ann"


# --- The race of issue 17 -------------------------------------------------------------------


@pytest.fixture
def row_holder() -> Iterator[psycopg.Connection]:
    """A second connection that can hold a step's row lock, as the old countdown path did."""
    params = connection.get_connection_params()
    with psycopg.connect(
        dbname=params["dbname"], host=params["host"], port=params["port"], user=params["user"]
    ) as other:
        yield other


def _in_thread(target: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run `target` on its own thread (and database connection); its result or error."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:
            out.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def _blocked_by(pid: int) -> bool:
    """Whether a backend waits for a lock the backend `pid` holds (pg_blocking_pids)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [pid]
        )
        row = cursor.fetchone()
    return bool(row and row[0])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_countdown_during_a_batch_poll_leaves_the_step_to_the_batch_which_records_at_once(
    no_worker: None,
    clean_redis: redis.Redis,
    later: Callable[[float], datetime.datetime],
    row_holder: psycopg.Connection,
    tmp_path: Path,
) -> None:
    """Issue 17's race, step by step: a 1 s wait's countdown came due with a poll_due batch.

    The batch claimed the step; the countdown found it claimed and left it (it must), but
    it held the step's row lock meanwhile, and the batch, skipping locked rows when it
    recorded, left the step to its 60 s lease. Now the batch waits for the row and
    records at once.
    """
    gate = tmp_path / "gate"
    poller = {"every": 60, "polls": 2, "holdUntilFile": str(gate)}
    run = _run("poller", [{"name": "poll", "type": "count_poll", "with": poller}])
    scheduling.advance(run.pk)
    step = StepRun.objects.get(run=run)
    later(61)
    batch, report = _in_thread(polls.poll_due)
    wait_for(lambda: bool(clean_redis.keys(f"{PREFIX}:holding:*")), what="the batch's poll")

    scheduling.run_step(step.pk)  # the countdown, at the same moment

    assert _calls(clean_redis, run, "poll") == 2, "the countdown left the claimed step alone"
    with row_holder.transaction():
        row_holder.execute("SELECT 1 FROM workflows_steprun WHERE id = %s FOR UPDATE", [step.pk])
        gate.touch()  # the batch's poll ends: the step is done
        # The batch now waits for the row: PostgreSQL says who waits on whose lock.
        holder = row_holder.info.backend_pid
        wait_for(lambda: _blocked_by(holder), what="the batch waiting for the row")
    batch.join(timeout=10)

    assert report == [polls.BatchReport(claimed=1, polled=1, finished=1)]
    step.refresh_from_db()
    assert (step.state, step.lease_owner, step.output) == ("succeeded", "", {"polls": 2})
    assert Run.objects.get(pk=run.pk).state == "succeeded"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_countdowns_and_batches_racing_poll_each_due_step_once_and_record_it(
    no_worker: None, clean_redis: redis.Redis, later: Callable[[float], datetime.datetime]
) -> None:
    template = wf.template(
        "poller", steps=[{"name": "poll", "type": "count_poll", "with": {"every": 60, "polls": 9}}]
    )
    runs = [_run(template, [], f"c{i}") for i in range(6)]
    for run in runs:
        scheduling.advance(run.pk)
    step_ids = list(StepRun.objects.filter(run__in=runs).values_list("pk", flat=True))
    for _ in range(3):
        later(61)  # every step due: a batch and each step's countdown at once
        threads = [_in_thread(polls.poll_due)[0]]
        threads += [_in_thread(functools.partial(scheduling.run_step, i))[0] for i in step_ids]
        for thread in threads:
            thread.join(timeout=30)
        steps = StepRun.objects.filter(pk__in=step_ids)
        assert {s.lease_owner for s in steps} == {""}, "every poll recorded, none left leased"
        assert {s.due_at for s in steps} == {clock.now() + datetime.timedelta(seconds=60)}
    assert {_calls(clean_redis, r, "poll") for r in runs} == {4}, "one poll per due time"


# --- The heartbeat, through a real worker ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_long_step_keeps_its_lease_while_its_worker_lives(
    no_worker: None, tmp_path: Path, clean_redis: redis.Redis
) -> None:
    # A step of 6 s, a worker taken for dead 3 s after its last heartbeat, a reconciler and
    # batch poller that reap every second: without its heartbeat it would run a second time.
    env = {
        "HOOKSVC_STEP_LEASE_SECONDS": "2",
        "HOOKSVC_WORKER_BEAT_SECONDS": "0.5",
        "HOOKSVC_WORKER_DEAD_SECONDS": "3",
    }
    worker = Worker(tmp_path / "data", tmp_path / "worker.log", env=env)
    worker.start()
    try:
        run = _run("long", [{"name": "slow", "type": "record", "with": {"seconds": 6}}])
        wait_for(lambda: Run.objects.get(pk=run.pk).state in Run.FINISHED, what="the run to finish")
    finally:
        worker.stop()
    assert Run.objects.get(pk=run.pk).state == "succeeded"
    assert int(clean_redis.get(f"{PREFIX}:executions:hooksvc-{run.pk}-slow") or 0) == 1
    assert StepRun.objects.get(run=run).claims == 1
