"""Rows of docs/engine.md's failure-case table that no other module shows (issue 30).

Covers: a worker that dies after it recorded an outcome but before it acknowledged the
message (acks_late: the message comes again) changes nothing when the message is delivered
again; the web's clock and the worker's disagree by half a minute either way: the hook
never lets a running run go, and asks CAPI back within [1, retryAfterSeconds] whatever the
skew; a worker whose clock runs ahead of the claimant's takes a lease over early, and the
claimant's late outcome is dropped, never written over the newer attempt's.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest

from tests.support import capi
from tests.support import workflows as wf
from workflows import clock
from workflows.engine import attempts, scheduling
from workflows.hookpath import answers
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, RunEvent, StepRun

pytestmark = pytest.mark.django_db


def _run(steps: list[dict[str, Any]]) -> tuple[Run, Any]:
    template = wf.template("cases", steps=steps, retryAfterSeconds=30)
    call = wf.call(cluster=capi.cluster_v1beta2(name="c1", uid="uid-c1"))
    [run] = hook_runs.runs_ensure(templates=[template], call=call)
    return run, call


def _snapshot(run: Run) -> list[tuple[Any, ...]]:
    steps = StepRun.objects.filter(run=run).order_by("pk")
    return [
        *steps.values_list("state", "claims", "memo", "output", "message", "due_at"),
        *Run.objects.filter(pk=run.pk).values_list("state", "message"),
        (RunEvent.objects.filter(run=run).count(),),
    ]


def test_a_message_delivered_again_after_its_work_was_recorded_changes_nothing(
    sent: list[tuple[str, Any]], later: Callable[[float], datetime.datetime]
) -> None:
    """The worker recorded the outcome and died before acknowledging the message; with
    acks_late the broker delivers it again (celery/app/task.py acks_late,
    reject_on_worker_lost): every write is a compare-and-set, so the second delivery finds
    nothing due and leaves every row as it was."""
    run, _ = _run([{"name": "poll", "type": "count_poll", "with": {"every": 30, "polls": 3}}])
    scheduling.advance(run.pk)
    step = StepRun.objects.get(run=run)
    later(31)
    scheduling.run_step(step.pk)
    recorded = _snapshot(run)

    scheduling.run_step(step.pk)  # the same message, again
    scheduling.advance(run.pk)

    assert _snapshot(run) == recorded


@pytest.mark.parametrize("skew", [-30, 30])
def test_a_web_clock_that_disagrees_with_the_workers_never_lets_a_run_go_early(
    skew: int, sent: list[tuple[str, Any]], later: Callable[[float], datetime.datetime]
) -> None:
    """The worker records due times on its clock; the web answers on its own. Whatever the
    skew, a running run holds (retryAfterSeconds > 0) and CAPI is asked back within the
    template's retryAfterSeconds: a skew delays an answer by at most that much."""
    run, call = _run([{"name": "poll", "type": "count_poll", "with": {"every": 10, "polls": 2}}])
    scheduling.advance(run.pk)
    worker_now = clock.now()
    later(skew)  # the web's clock, for the answer
    answer = answers.answer(call, handler_name="before-cluster-upgrade")
    assert 1 <= answer.retry_after <= 30, (skew, answer)
    later(-skew)
    assert clock.now() == worker_now


def test_a_lease_taken_over_by_a_worker_whose_clock_runs_ahead_drops_the_late_outcome(
    sent: list[tuple[str, Any]], later: Callable[[float], datetime.datetime]
) -> None:
    """Leases are judged on the claimant's clock: a worker a lease-length ahead claims a
    step another still holds. The holder's outcome is then dropped (its token is old):
    a step's code may run twice, its outcome is written once (invariant 4)."""
    run, _ = _run([{"name": "s", "type": "tracked"}])
    [first] = scheduling._schedule(run.pk, [])
    late = attempts.run(first)
    ahead = first.step.lease_expires_at
    assert ahead is not None
    later((ahead - clock.now()).total_seconds() + 1)  # the other worker's clock
    [second] = attempts.claim(step_ids=[first.step.pk])
    scheduling.advance(run.pk, [attempts.run(second)])
    written = _snapshot(run)

    scheduling.advance(run.pk, [late])

    assert _snapshot(run) == written
    assert StepRun.objects.get(pk=first.step.pk).claims == second.lease.token
