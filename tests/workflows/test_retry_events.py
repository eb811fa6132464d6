"""Every failed attempt the engine retries is in the run's history: which attempt, the error,
when the next one is. A retried step often stays `ready` (ready, failed, ready again), a move
that writes no transition, so without its own event the history showed no retry at all."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.support import capi
from tests.support import workflows as wf
from workflows.engine import attempts, lifecycle, scheduling, transitions
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, RunEvent

pytestmark = pytest.mark.django_db


def test_each_retried_attempt_is_recorded_with_its_error_and_next_time(
    monkeypatch: pytest.MonkeyPatch, now: list[datetime.datetime], sent: list[Any]
) -> None:
    monkeypatch.setattr(lifecycle, "jitter", lambda cap: cap)  # backoff 2 s, then 4 s
    template = wf.template(
        "flaky", steps=[{"name": "call", "type": "flaky", "with": {"failures": 2}, "retries": 3}]
    )
    call = wf.call(cluster=capi.cluster_v1beta2(name="c1", uid="uid-c1"))
    [run] = hook_runs.runs_ensure(templates=[template], call=call)
    start = now[0]
    scheduling.advance(run.pk)
    step = run.steps.get()
    now[0] = start + datetime.timedelta(seconds=2)
    scheduling.run_step(step.pk)
    now[0] = start + datetime.timedelta(seconds=6)
    scheduling.run_step(step.pk)

    run.refresh_from_db()
    assert run.state == Run.State.SUCCEEDED
    retries = RunEvent.objects.filter(run=run, name=transitions.RETRY).order_by("id")
    first, second = start + datetime.timedelta(seconds=2), start + datetime.timedelta(seconds=6)
    assert [(e.step_name, e.kind, e.actor, e.details) for e in retries] == [
        (
            "call",
            RunEvent.Kind.TRANSITION,
            "",
            {
                "attempt": 1,
                "attempts": 4,
                "error": "attempt 1 refused",
                "nextAt": first.isoformat(),
            },
        ),
        (
            "call",
            RunEvent.Kind.TRANSITION,
            "",
            {
                "attempt": 2,
                "attempts": 4,
                "error": "attempt 2 refused",
                "nextAt": second.isoformat(),
            },
        ),
    ]
    assert retries[0].message == (
        f"attempt 1 of 4 failed: attempt 1 refused; next attempt at "
        f"{first.strftime('%Y-%m-%d %H:%M:%S')}Z"
    )


def test_a_step_out_of_retries_records_its_failure_not_another_retry(
    monkeypatch: pytest.MonkeyPatch, now: list[datetime.datetime], sent: list[Any]
) -> None:
    monkeypatch.setattr(lifecycle, "jitter", lambda cap: cap)
    # No time budget: the count alone decides.
    step = {"name": "call", "type": "flaky", "with": {"failures": 5}, "retries": 1}
    template = wf.template("flaky", steps=[{**step, "retryForSeconds": 0}])
    call = wf.call(cluster=capi.cluster_v1beta2(name="c1", uid="uid-c1"))
    [run] = hook_runs.runs_ensure(templates=[template], call=call)
    scheduling.advance(run.pk)
    now[0] += datetime.timedelta(seconds=2)
    scheduling.run_step(run.steps.get().pk)

    run.refresh_from_db()
    assert run.state == Run.State.FAILED
    history = [
        (e.name, e.message)
        for e in RunEvent.objects.filter(run=run, step_name="call").order_by("id")
    ]
    assert [name for name, _ in history] == [transitions.RETRY, "ready->failed"]
    assert history[1][1] == "attempt 2 refused"


def test_a_retrys_backoff_counts_from_the_end_of_a_slow_attempt(
    monkeypatch: pytest.MonkeyPatch, now: list[datetime.datetime], sent: list[Any]
) -> None:
    """An attempt that fails after 5 s (a connect timeout, say) with a 2 s backoff: the next
    attempt is due 2 s after the failure, not 3 s before it was recorded (which let the same
    advance run the step again at once: `failures` 2 after one call)."""
    monkeypatch.setattr(lifecycle, "jitter", lambda cap: cap)  # backoff 2 s
    execute_once = attempts.execute_once

    def slow(*args: Any, **kwargs: Any) -> Any:
        now[0] += datetime.timedelta(seconds=5)
        return execute_once(*args, **kwargs)

    monkeypatch.setattr(attempts, "execute_once", slow)
    template = wf.template(
        "flaky", steps=[{"name": "call", "type": "flaky", "with": {"failures": 2}, "retries": 3}]
    )
    call = wf.call(cluster=capi.cluster_v1beta2(name="c1", uid="uid-c1"))
    [run] = hook_runs.runs_ensure(templates=[template], call=call)
    start = now[0]
    scheduling.advance(run.pk)
    step = run.steps.get()
    assert (step.state, step.failures) == ("ready", 1)
    assert step.due_at == start + datetime.timedelta(seconds=5 + 2)
    retry = RunEvent.objects.get(run=run, name=transitions.RETRY)
    assert retry.details["nextAt"] == step.due_at.isoformat()
