"""Error budgets that reset on progress (issue 22): only temporary errors that persist fail a step.

Covers: `after` (workflows.engine.lifecycle), a pure function, as a table: a streak of temporary
errors is retried while within `retries` OR younger than `retryForSeconds`, and fails the
step past both; `retries: 0, retryForSeconds: 0` fails at the first error; a permanent error
fails at once; a poll is progress and ends the streak; an error's own delay (a 429's
Retry-After) is the next attempt's. Through the engine: a step that made progress between
five transient errors (never two in a row) succeeds with `retries: 1` (it used to fail at
its second error); through a real worker, a long step with an error after every other poll
succeeds with the defaults (it used to fail at its fourth).
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest

from tests.support import capi
from tests.support import workflows as wf
from tests.support.worker import Worker
from workflows import errors
from workflows.engine import lifecycle, scheduling, writes
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, StepRun
from workflows.steps import registry

T0 = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)


def _result(
    outcome: registry.Outcome | errors.StepError,
    *,
    failures: int = 0,
    since: float | None = None,
    retries: int = 3,
    retry_for: int = 300,
    at: float = 0,
    ended: float | None = None,
) -> writes.Result:
    """An attempt's result at T0 + `at` s, of a ready step with `failures` in a row so far
    (the streak began at T0 + `since`)."""
    step = StepRun(
        id=1,
        name="s",
        type="flaky_poll",
        state=StepRun.State.READY,
        retries=retries,
        retry_for_seconds=retry_for,
        failures=failures,
        failing_since=None if since is None else T0 + datetime.timedelta(seconds=since),
        memo={},
        output={},
    )
    moment = T0 + datetime.timedelta(seconds=at)
    return writes.Result(
        step=step,
        run_name="t",
        outcome=outcome,
        memo={},
        at=moment,
        started=T0,
        ended=None if ended is None else T0 + datetime.timedelta(seconds=ended),
    )


TEMPORARY = errors.TemporaryError("the API server did not answer")


@pytest.mark.parametrize(
    ("case", "state", "failures", "since"),
    [
        # The first error starts a streak.
        (dict(), "ready", 1, 0),
        # Past `retries` in a row, but the streak is 10 s old: the API server may be back.
        (dict(failures=3, since=-10), "ready", 4, -10),
        # Past both `retries` and `retryForSeconds`: it persists.
        (dict(failures=3, since=-300), "failed", 4, -300),
        # Within `retries`, however old the streak.
        (dict(failures=2, since=-3600), "ready", 3, -3600),
        # No budget at all: the first error fails it.
        (dict(retries=0, retry_for=0), "failed", 1, 0),
        # The streak lasts until the failed attempt ended (a call that hung for its bound).
        (dict(failures=3, since=-200, ended=120), "failed", 4, -200),
    ],
)
def test_a_temporary_error_fails_the_step_only_past_both_retries_and_retry_for_seconds(
    case: dict[str, Any], state: str, failures: int, since: float
) -> None:
    write = lifecycle.after(_result(TEMPORARY, **case))
    assert write.to == state
    assert write.columns["failures"] == failures
    assert write.columns["failing_since"] == T0 + datetime.timedelta(seconds=since)


def test_a_permanent_error_fails_at_once_whatever_the_budget() -> None:
    outcome = errors.PermanentError("the Job failed")
    assert lifecycle.after(_result(outcome, retries=100, retry_for=3600)).to == "failed"


def test_a_poll_is_progress_and_ends_the_streak() -> None:
    write = lifecycle.after(_result(registry.Poll(after=5), failures=3, since=-100))
    assert write.to == "waiting"
    assert (write.columns["failures"], write.columns["failing_since"]) == (0, None)


def test_an_errors_own_delay_is_the_next_attempts() -> None:
    """A 429 or 503's Retry-After (workflows.kube.k8s sets TemporaryError.delay) sets when the
    next attempt comes, counted from the failed attempt's end; it still counts in the budget."""
    outcome = errors.TemporaryError("too many requests", delay=42)
    write = lifecycle.after(_result(outcome, failures=1, since=-5, ended=3))
    assert write.to == "ready"
    assert write.columns["due_at"] == T0 + datetime.timedelta(seconds=3 + 42)
    assert write.columns["failures"] == 2


# --- Through the engine ---------------------------------------------------------------------


def _run(step: dict[str, Any], cluster: str = "c1") -> Run:
    template = wf.template("flaky-poller", steps=[step])
    call = wf.call(cluster=capi.cluster_v1beta2(name=cluster, uid=f"uid-{cluster}"))
    [run] = hook_runs.runs_ensure(templates=[template], call=call)
    return run


@pytest.mark.django_db
def test_a_step_that_makes_progress_between_five_errors_succeeds(
    sent: list[tuple[str, Any]], now: list[datetime.datetime]
) -> None:
    step = {
        "name": "poll",
        "type": "flaky_poll",
        "with": {"polls": 6, "every": 60, "failOn": [2, 4, 6, 8, 10]},
        "retries": 1,
        "retryForSeconds": 0,
    }
    run = _run(step)
    scheduling.advance(run.pk)
    for _ in range(20):  # each attempt when it is due, on the held clock
        row = StepRun.objects.get(run=run)
        if row.state in StepRun.FINISHED:
            break
        assert row.due_at is not None
        now[0] = max(now[0], row.due_at)
        scheduling.run_step(row.pk)
    row = StepRun.objects.get(run=run)
    assert (row.state, row.output) == ("succeeded", {"polls": 6, "calls": 11})
    assert Run.objects.get(pk=run.pk).state == "succeeded"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_long_flaky_step_succeeds_through_a_real_worker(worker: Worker) -> None:
    # Defaults: retries 3, retryForSeconds 300. Six errors over its life, never two in a row.
    step = {
        "name": "poll",
        "type": "flaky_poll",
        "with": {"polls": 8, "every": 0.5, "failOn": [2, 4, 6, 8, 10, 12]},
    }
    run = _run(step, "flaky")
    deadline = time.monotonic() + 90
    while Run.objects.get(pk=run.pk).state not in Run.FINISHED:
        assert time.monotonic() < deadline, "the run did not finish within 90 s"
        time.sleep(0.2)
    row = StepRun.objects.get(run=run)
    assert (row.state, row.output) == ("succeeded", {"polls": 8, "calls": 14})
    assert Run.objects.get(pk=run.pk).state == "succeeded"
