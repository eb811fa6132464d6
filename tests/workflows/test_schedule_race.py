"""Two workers scheduling one run at once: the second sees what the first committed.

Covers: a worker whose scheduling waited for the run's lock while another worker started
the run (created its steps, moved it to running) reads those steps once it holds the
lock. Under READ COMMITTED, PostgreSQL re-reads only the locked row after such a wait;
rows joined in the same statement stay as its snapshot saw them (PostgreSQL documentation,
"Transaction Isolation", 13.2.1 Read Committed: "it does not see effects of those commands
on other rows"). Reading the run and its steps in one locking statement gave a running
run with no steps, which "every step done" then finished: the hook let the lifecycle go
while the run's step was still at work (seen in tests/faults, where the reconciler and the
hook's own message advanced a new run together).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from tests.support import capi
from tests.support import workflows as wf
from workflows import clock
from workflows.engine import scheduling
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, StepRun


def _waiting_for_a_lock(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE '%workflows_run%FOR UPDATE%'"
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.django_db(transaction=True)
def test_a_run_started_while_another_worker_waited_for_its_lock_keeps_its_steps(
    sent: list[tuple[str, Any]],
) -> None:
    template = wf.template("held", steps=[{"name": "approve", "type": "approval"}])
    call = wf.call(cluster=capi.cluster_v1beta2(name="c1", uid="uid-c1"))
    [run] = hook_runs.runs_ensure(templates=[template], call=call)
    params = connection.get_connection_params()
    dsn = psycopg.conninfo.make_conninfo(
        dbname=params["dbname"], host=params["host"], port=params["port"], user=params["user"]
    )
    started = threading.Event()
    errors: list[BaseException] = []

    def first_worker() -> None:
        """Starts the run under its lock, and commits once the second worker waits for it."""
        try:
            with transaction.atomic():
                locked = scheduling._lock(run.pk, asynchronous=False)
                assert locked is not None
                scheduling._run_start(locked, clock.now())
                started.set()
                deadline = time.monotonic() + 60
                while not _waiting_for_a_lock(dsn):
                    assert time.monotonic() < deadline, "the second worker never waited"
                    time.sleep(0.05)
        except BaseException as exc:
            errors.append(exc)
            started.set()
        finally:
            connection.close()

    thread = threading.Thread(target=first_worker)
    thread.start()
    assert started.wait(60)
    scheduling.advance(run.pk)  # the second worker: waits for the lock, then schedules
    thread.join(60)

    assert errors == []
    assert Run.objects.get(pk=run.pk).state == "running", "finished with its step not done"
    assert StepRun.objects.get(run=run).state == "waiting"  # the approval, polled once
