"""Dead workers found in seconds (issue 22): a heartbeat row per worker process, named by leases.

Covers: a claim writes its process' heartbeat first, in the claim's transaction, so no
reaper takes a process that just claimed for dead; the reaper forgets processes whose
heartbeat is older than HOOKSVC_WORKER_DEAD_SECONDS (on the database's clock), frees the
leases they held, long before those pass, and sends the ready ones, leaving live processes'
leases alone; each batch poll and the reconciler reap; a lease's owner names a nonce, so a
pid the kernel hands out again is not taken for the dead process. Through real worker
processes: a SIGKILLed worker's step is claimed again long before its lease (60 s beyond
the step's five-minute call bound) passes (it used to wait for its lease to pass).
"""

from __future__ import annotations

import datetime
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection

from tests.support import capi
from tests.support import workflows as wf
from tests.support.worker import Worker, wait_for
from tests.workflows.steps_for_tests import PREFIX
from workflows.engine import leases, polls, reconciler, scheduling, workers
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, StepRun, WorkerBeat

DEAD = "gone-host:4242:0badc0de"
LIVE = "live-host:4243:feedbeef"


def _run(steps: list[dict[str, Any]], cluster: str = "c1") -> Run:
    template = wf.template(f"beats-{cluster}", steps=steps)
    call = wf.call(cluster=capi.cluster_v1beta2(name=cluster, uid=f"uid-{cluster}"))
    [run] = hook_runs.runs_ensure(templates=[template], call=call)
    return run


def _waiting(cluster: str) -> Run:
    """A started run whose one step waits (polled again in a minute), no lease on it."""
    run = _run([{"name": "s", "type": "count_poll", "with": {"every": 60}}], cluster)
    scheduling.advance(run.pk)
    return run


def _beat(owner: str, seconds_ago: float) -> None:
    """A heartbeat row as `owner` last wrote it, on the database's clock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO workflows_workerbeat (owner, started_at, beat_at) VALUES"
            " (%s, now() - interval '1 hour', now() - make_interval(secs => %s))",
            [owner, seconds_ago],
        )


def _leased(run: Run, owner: str, state: str) -> StepRun:
    """The run's step, held by `owner` with a lease that passes only in an hour."""
    step = StepRun.objects.get(run=run)
    expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    StepRun.objects.filter(pk=step.pk).update(
        state=state,
        lease_owner=owner,
        lease_expires_at=expires,
        claims=step.claims + 1,
        unrecorded=step.unrecorded + 1,
    )
    return StepRun.objects.get(pk=step.pk)


@pytest.mark.django_db
def test_a_claim_writes_its_process_heartbeat_with_it() -> None:
    run = _run([{"name": "s", "type": "tracked"}])
    [attempt] = scheduling._schedule(run.pk, [])  # the run starts: its step is claimed
    assert attempt.lease.owner == leases.owner()
    beat = WorkerBeat.objects.get(owner=leases.owner())
    with connection.cursor() as cursor:
        cursor.execute("SELECT now() - %s < interval '1 minute'", [beat.beat_at])
        assert cursor.fetchone()[0], "written with the claim"


def test_a_lease_owner_is_new_at_every_start_of_a_process() -> None:
    _, pid, nonce = leases.owner().split(":")
    assert int(pid) > 0 and len(nonce) == 8
    # Another start that got the same pid (a restarted container) is another owner.
    again = leases._owner(int(pid))
    assert again.rsplit(":", 1)[0] == leases.owner().rsplit(":", 1)[0]
    assert again != leases.owner()


def test_threads_asking_for_the_owner_first_at_once_get_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A claim's thread and the heartbeat's may ask first at once: two owners would leave the
    claim's lease to a heartbeat row nobody writes, and a reaper would free it."""
    monkeypatch.setattr(leases, "_owners", {})
    barrier = threading.Barrier(16)
    seen: list[str] = []

    def ask() -> None:
        barrier.wait()
        seen.append(leases.owner())

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 16 and len(set(seen)) == 1, set(seen)


@pytest.mark.django_db
def test_the_reaper_frees_a_dead_processes_steps_and_leaves_live_ones_alone(
    sent: list[tuple[str, Any]], django_capture_on_commit_callbacks: Any
) -> None:
    ready, waiting, live = _waiting("ready"), _waiting("waiting"), _waiting("live")
    _beat(DEAD, seconds_ago=60)
    _beat(LIVE, seconds_ago=1)
    dead_ready = _leased(ready, DEAD, "ready")
    dead_waiting = _leased(waiting, DEAD, "waiting")
    live_step = _leased(live, LIVE, "ready")

    with django_capture_on_commit_callbacks(execute=True):
        reaped = workers.reap()

    # (This test process' own row may have aged too, between earlier tests: it held nothing.)
    assert DEAD in reaped.owners and LIVE not in reaped.owners
    assert reaped.steps == sorted([dead_ready.pk, dead_waiting.pk])
    for step in (dead_ready, dead_waiting):
        step.refresh_from_db()
        assert (step.lease_owner, step.lease_expires_at) == ("", None)
        assert (step.lost_by, step.unrecorded) == (DEAD, 1), "its attempt was lost, and counted"
    live_step.refresh_from_db()
    assert live_step.lease_owner == LIVE
    assert set(WorkerBeat.objects.values_list("owner", flat=True)) & {DEAD, LIVE} == {LIVE}
    # Each gets its message: an attempt was lost on it, so no batch takes it (issue 30).
    assert ("run_step", dead_ready.pk) in sent
    assert ("run_step", dead_waiting.pk) in sent
    assert workers.reap() == workers.Reaped(owners=[], steps=[]), "reaped once"


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["batch poll", "reconciler"])
def test_each_batch_poll_and_the_reconciler_reap(who: str, sent: list[tuple[str, Any]]) -> None:
    run = _waiting("c1")
    _beat(DEAD, seconds_ago=60)
    step = _leased(run, DEAD, "ready")
    if who == "batch poll":
        polls.poll_due()
    else:
        reconciler.reconcile()
    step.refresh_from_db()
    assert step.lease_owner != DEAD
    assert not WorkerBeat.objects.filter(owner=DEAD).exists()


@pytest.mark.django_db(transaction=True)
def test_a_lease_whose_outcome_could_not_be_recorded_is_freed_by_the_heartbeat(
    no_worker: None,
) -> None:
    """A live process keeps its leases: one whose outcome a failure kept from being recorded
    (the database went away mid-record) must not hold its step until its call's bound
    passes. The heartbeat frees it, by compare-and-set on its token."""
    run = _run([{"name": "s", "type": "record"}])
    [attempt] = scheduling._schedule(run.pk, [])  # the run starts: its step is claimed
    with pytest.raises(RuntimeError), leases.heartbeat.hold([attempt.lease]):
        raise RuntimeError("the database went away while the outcome was recorded")
    wait_for(
        lambda: StepRun.objects.get(pk=attempt.step.pk).lease_owner == "",
        timeout=30,
        what="the lease freed",
    )
    step = StepRun.objects.get(pk=attempt.step.pk)
    assert (step.state, step.claims, step.lease_expires_at) == ("ready", attempt.lease.token, None)


# --- Through real worker processes ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_sigkilled_workers_step_is_claimed_again_long_before_its_lease_passes(
    no_worker: None, tmp_path: Path, clean_redis: redis.Redis
) -> None:
    """The heartbeat's absence frees the step, not its lease: it is claimed again while the
    dead worker's lease (60 s beyond the call's bound of 300 s) still holds, on the database's
    clock. Not a stopwatch: on a loaded machine the new worker's start alone may take longer
    than WORKER_DEAD_SECONDS, which is what docs/engine.md bounds (10 s, then a batch poll)."""
    gate = tmp_path / "release"
    # Production's lease: only the heartbeat's absence can free the step in minutes.
    env = {"HOOKSVC_STEP_LEASE_SECONDS": "60"}
    worker = Worker(tmp_path / "data", tmp_path / "worker.log", env=env)
    worker.start()
    try:
        run = _run([{"name": "snapshot", "type": "record", "with": {"holdUntilFile": str(gate)}}])
        wait_for(lambda: bool(clean_redis.keys(f"{PREFIX}:holding:*")), what="the step")
        first = StepRun.objects.get(run=run)
        assert first.lease_owner and first.lease_expires_at is not None
        worker.kill()
        killed = time.monotonic()
        gate.touch()
        worker.start()
        wait_for(
            lambda: StepRun.objects.get(run=run).claims > first.claims,
            timeout=120,
            what="the step claimed again",
        )
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            [(reclaimed_by,)] = cursor.fetchall()
        print(f"claimed again {time.monotonic() - killed:.1f} s after SIGKILL")
        wait_for(lambda: Run.objects.get(pk=run.pk).state in Run.FINISHED, what="the run")
    finally:
        worker.stop()
    assert reclaimed_by < first.lease_expires_at, (
        f"claimed again only by {reclaimed_by}, its lease passed at {first.lease_expires_at}:"
        " the dead worker's missing heartbeat freed nothing"
    )
    assert Run.objects.get(pk=run.pk).state == "succeeded"
    assert not WorkerBeat.objects.filter(owner=first.lease_owner).exists(), "forgotten"
