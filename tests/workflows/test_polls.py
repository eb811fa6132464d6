"""Batched polls in-process (no worker): what a batch claims, polls, writes and finishes.

Covers: a long wait gets no countdown message and a short one does (a timer's end up to
30 s: on time); the claim takes at most N due waiting steps of running runs, most overdue
first, and leases them; a batch writes repeated polls back in one statement and leaves the
run's row alone; Done, a failure and a timeout from a batch finish the run as the countdown
path does; a row an operator moved on while it was leased is not overwritten; a batch hands
back what it has not polled by half its lease; the reconciler leaves due waiting steps to
the batch poller; bad batch settings stop the process with their name.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.support import capi, servers
from tests.support import workflows as wf
from tests.workflows import steps_for_tests  # noqa: F401  (registers count_poll)
from workflows import clock
from workflows.engine import attempts, lifecycle, polls, reconciler, scheduling
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, RunEvent, StepRun, WorkerBeat, WorkflowTemplate
from workflows.operators import actions
from workflows.steps import registry

pytestmark = pytest.mark.django_db


def _run(template: WorkflowTemplate | str, steps: list[dict[str, Any]], cluster: str = "c1") -> Run:
    tmpl = wf.template(template, steps=steps) if isinstance(template, str) else template
    call = wf.call(cluster=capi.cluster_v1beta2(name=cluster, uid=f"uid-{cluster}"))
    [run] = hook_runs.runs_ensure(templates=[tmpl], call=call)
    return run


def _poller(every: float = 60, polls_: int = 3, **params: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": "poll",
            "type": "count_poll",
            "with": {"every": every, "polls": polls_, **params},
        }
    ]


def _later(now: list[datetime.datetime], seconds: float) -> None:
    now[0] = now[0] + datetime.timedelta(seconds=seconds)


def _writes(statement: str) -> bool:
    """A statement that changes rows (the engine's are UPDATEs, some behind a WITH)."""
    return any(word in statement for word in ("UPDATE ", "INSERT ", "DELETE "))


@pytest.mark.parametrize(("seconds", "countdown"), [(3600, False), (25, True), (2, True)])
def test_a_long_wait_gets_no_countdown_message_and_a_short_one_does(
    sent: list[tuple[str, Any]],
    django_capture_on_commit_callbacks: Any,
    seconds: int,
    countdown: bool,
) -> None:
    run = _run("timer", [{"name": "w", "type": "wait", "with": {"seconds": seconds}}])
    with django_capture_on_commit_callbacks(execute=True):
        scheduling.advance(run.pk)
    step = StepRun.objects.get(run=run)
    assert step.state == "waiting"
    assert (("run_step_later", (step.pk,)) in sent) is countdown


@pytest.mark.parametrize(
    ("on_time", "after", "countdown"),
    [(True, 29.0, True), (True, 31.0, False), (False, 29.0, False), (False, 4.0, True)],
)
def test_a_poll_asked_for_on_time_gets_a_countdown_up_to_30_seconds_ahead(
    on_time: bool, after: float, countdown: bool
) -> None:
    """A timer's end (`wait`: Poll.on_time) is polled when it ends, not up to a beat later:
    a hook held on it lets go then. A step that polls every 29 s stays the batch's."""
    with override_settings(POLL_BATCH_MIN_WAIT_SECONDS=5):
        assert lifecycle.needs_countdown("waiting", after, on_time=on_time) is countdown


def test_the_claim_takes_at_most_n_due_waiting_steps_most_overdue_first(
    now: list[datetime.datetime],
) -> None:
    template = wf.template("poller", steps=_poller())
    runs = [_run(template, [], f"c{i}") for i in range(7)]
    for i, run in enumerate(runs):
        scheduling.advance(run.pk)
        # c0 is the most overdue, c6 the least; all are due an hour from now.
        StepRun.objects.filter(run=run).update(due_at=now[0] + datetime.timedelta(seconds=i))
    not_due = _run(template, [], "later")
    scheduling.advance(not_due.pk)
    ready = _run(template, [], "ready")
    scheduling.advance(ready.pk)
    StepRun.objects.filter(run=ready).update(state="ready", due_at=now[0])
    cancelled = _run(template, [], "cancelled")
    scheduling.advance(cancelled.pk)
    Run.objects.filter(pk=cancelled.pk).update(state="cancelled")
    StepRun.objects.filter(run=cancelled).update(due_at=now[0])
    StepRun.objects.filter(run=not_due).update(due_at=now[0] + datetime.timedelta(hours=2))
    _later(now, 3600)

    first = attempts.claim(limit=3, lease_seconds=60)
    second = attempts.claim(limit=3, lease_seconds=60)
    third = attempts.claim(limit=3, lease_seconds=60)

    def clusters(claimed: list[attempts.Attempt]) -> list[str]:
        return sorted(a.run.cluster_name for a in claimed)

    assert clusters(first) == ["c0", "c1", "c2"]
    assert clusters(second) == ["c3", "c4", "c5"]
    assert clusters(third) == ["c6"]
    assert attempts.claim(limit=3, lease_seconds=60) == []
    # A lease lasts the batch's 60 s and its call's bound (a custom type's default).
    lease = now[0] + datetime.timedelta(seconds=60 + registry.DEFAULT_CALL_TIMEOUT_SECONDS)
    leased = StepRun.objects.filter(lease_expires_at=lease).values_list(
        "run__cluster_name", flat=True
    )
    assert sorted(leased) == [f"c{i}" for i in range(7)]
    assert first[0].run.context["cluster"]["name"] == first[0].run.cluster_name


def test_a_full_batch_asks_for_the_next_one_at_once(
    sent: list[tuple[str, Any]], now: list[datetime.datetime]
) -> None:
    template = wf.template("poller", steps=_poller())
    for i in range(3):
        scheduling.advance(_run(template, [], f"c{i}").pk)
    _later(now, 61)
    assert polls.poll_due(limit=2) == polls.BatchReport(claimed=2, polled=2, finished=0)
    assert sent.count(("poll_due", None)) == 1
    assert polls.poll_due(limit=2) == polls.BatchReport(claimed=1, polled=1, finished=0)
    assert sent.count(("poll_due", None)) == 1


def test_a_batch_writes_its_polls_in_one_statement_and_leaves_runs_alone(
    sent: list[tuple[str, Any]], now: list[datetime.datetime]
) -> None:
    template = wf.template("poller", steps=_poller(polls_=5))
    runs = [_run(template, [], f"c{i}") for i in range(4)]
    for run in runs:
        scheduling.advance(run.pk)
    before = {r["id"]: r for r in Run.objects.values()}
    events = RunEvent.objects.count()
    _later(now, 61)
    # No process to take for dead (this one's heartbeat may have aged between tests): the
    # batch's reaper only reads, and the writes are the batch's own.
    WorkerBeat.objects.all().delete()

    with CaptureQueriesContext(connection) as queries:
        report = polls.poll_due()

    assert report == polls.BatchReport(claimed=4, polled=4, finished=0)
    writes = [sql for sql in wf.without_heartbeat(queries) if _writes(sql)]
    assert len(writes) == 2, writes  # the claim and the write-back
    assert {r["id"]: r for r in Run.objects.values()} == before, "a poll leaves the run alone"
    assert RunEvent.objects.count() == events
    for step in StepRun.objects.all():
        assert (step.state, step.memo, step.message) == ("waiting", {"polls": 2}, "poll 2")
        assert step.due_at == now[0] + datetime.timedelta(seconds=60)
    assert not [m for m in sent if m[0] == "run_step_later"], "long waits get no countdown"


@pytest.mark.parametrize(("end", "state"), [("done", "succeeded"), ("fail", "failed")])
def test_a_batch_poll_that_ends_the_step_finishes_its_run(
    sent: list[tuple[str, Any]],
    now: list[datetime.datetime],
    django_capture_on_commit_callbacks: Any,
    end: str,
    state: str,
) -> None:
    run = _run("poller", _poller(polls_=2, end=end))
    scheduling.advance(run.pk)
    _later(now, 61)

    with django_capture_on_commit_callbacks(execute=True):
        assert polls.poll_due() == polls.BatchReport(claimed=1, polled=1, finished=1)

    step = StepRun.objects.get(run=run)
    step_message = "the condition failed" if end == "fail" else ""
    assert (step.state, step.message, step.due_at) == (state, step_message, None)
    run.refresh_from_db()
    assert run.state == state
    if end == "fail":
        assert "failed at step poll: the condition failed" in run.message
    assert ("cluster_event", run.pk) in sent


def test_a_step_past_its_timeout_fails_in_the_batch(
    sent: list[tuple[str, Any]], now: list[datetime.datetime]
) -> None:
    steps = [{**_poller(polls_=10)[0], "timeoutSeconds": 100, "retries": 3}]
    run = _run("poller", steps)
    scheduling.advance(run.pk)
    _later(now, 61)
    polls.poll_due()
    _later(now, 61)

    polls.poll_due()

    step = StepRun.objects.get(run=run)
    assert (step.state, step.message, step.memo) == (
        "failed",
        "timed out after 100 s",
        {"polls": 2},
    )
    assert Run.objects.get(pk=run.pk).state == "failed"


def test_an_approval_while_its_step_is_leased_is_not_overwritten(
    sent: list[tuple[str, Any]], now: list[datetime.datetime]
) -> None:
    run = _run("gate", [{"name": "approve", "type": "approval"}])
    scheduling.advance(run.pk)
    _later(now, 301)
    [attempt] = attempts.claim(limit=10, lease_seconds=60)
    # The approval lands while the batch polls the step (its function saw no approval yet).
    actions.step_approve(run_id=run.pk, step_name="approve", actor="ops:ann", reason="ok")
    stale = attempts.tried(attempt, registry.Poll(after=300, message="old"), {}, at=now[0])

    assert attempts.record_repeats([stale]) == set(), "the stale poll is dropped"

    approved = StepRun.objects.get(pk=attempt.step.pk)
    assert approved.memo["approved_by"] == "ops:ann"
    assert approved.message != "old"


def test_the_reconciler_leaves_due_waiting_steps_to_the_batch_poller(
    sent: list[tuple[str, Any]], now: list[datetime.datetime]
) -> None:
    run = _run("poller", _poller(every=2, polls_=2))
    scheduling.advance(run.pk)  # a short wait: its countdown is never delivered here
    _later(now, 600)

    assert reconciler.reconcile() == reconciler.ReconcileReport(runs=0, steps=0)
    assert polls.poll_due().finished == 1
    assert Run.objects.get(pk=run.pk).state == "succeeded"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("HOOKSVC_POLL_BATCH_SIZE", "many"),
        ("HOOKSVC_POLL_LEASE_SECONDS", "0"),
        ("HOOKSVC_POLL_BATCH_SECONDS", "-1"),
        ("HOOKSVC_POLL_BATCH_MIN_WAIT_SECONDS", "nan"),
        ("HOOKSVC_HOOK_CALL_FLUSH_SECONDS", "nan"),
        ("HOOKSVC_RECONCILE_SECONDS", "0"),
        ("HOOKSVC_RECONCILE_GRACE_SECONDS", "15s"),
        ("HOOKSVC_HOOK_CALL_RETENTION_DAYS", "-1"),
    ],
)
def test_a_bad_number_setting_stops_the_process_naming_it(variable: str, value: str) -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "hooksvc.settings", variable: value}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=servers.ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert f"RuntimeError: {variable} must be a number" in result.stderr


def test_a_batch_past_half_its_lease_hands_back_the_steps_it_has_not_polled(
    sent: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    template = wf.template("poller", steps=_poller())
    runs = [_run(template, [], f"c{i}") for i in range(2)]
    for run in runs:
        scheduling.advance(run.pk)
    start = timezone.now() + datetime.timedelta(seconds=61)
    # The claim, then the first poll, then the second step's turn: 40 s into a 60 s lease.
    times = iter([start, start + datetime.timedelta(seconds=1)])
    late = start + datetime.timedelta(seconds=40)
    monkeypatch.setattr(clock, "now", lambda: next(times, late))

    assert polls.poll_due() == polls.BatchReport(claimed=2, polled=1, finished=0)

    polled, handed_back = sorted(StepRun.objects.all(), key=lambda s: -s.memo["polls"])
    assert polled.memo == {"polls": 2}
    assert (handed_back.memo, handed_back.due_at) == ({"polls": 1}, late), "due at once"
