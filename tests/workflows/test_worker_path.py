"""The worker path in-process (no worker): what a step costs, what it records, what is re-sent.

Covers: a chain of `noop` steps is two statements whatever its length (steps run ahead of
their claim, written only as their code saw them); routine step progress writes no
RunEvent while run transitions do; a repeated poll updates only its step's row; the
reconciler sends an overdue run or its overdue ready steps, never both.
"""

from __future__ import annotations

import datetime
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.support import capi
from tests.support import workflows as wf
from tests.workflows import runs, steps_for_tests  # noqa: F401  (registers count_poll)
from workflows.engine import attempts, reconciler, scheduling, stepstate
from workflows.hookpath import answers
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, RunEvent, StepRun, WorkflowTemplate
from workflows.operators import actions

pytestmark = pytest.mark.django_db


def _statements(queries: Sequence[str]) -> list[str]:
    """The statements among `queries`, leaving out the savepoints of the test's transaction
    (the check that no transaction of the engine's is open while a step runs makes one)."""
    return [q for q in queries if q.split()[0] not in ("SAVEPOINT", "RELEASE")]


@pytest.fixture
def on_commit(django_capture_on_commit_callbacks: Any) -> Any:
    """Runs what the engine sends after commit (the test's transaction never commits)."""
    return django_capture_on_commit_callbacks


def _run(template: WorkflowTemplate | str, steps: list[dict[str, Any]], cluster: str = "c1") -> Run:
    tmpl = wf.template(template, steps=steps) if isinstance(template, str) else template
    call = wf.call(cluster=capi.cluster_v1beta2(name=cluster, uid=f"uid-{cluster}"))
    [run] = hook_runs.runs_ensure(templates=[tmpl], call=call)
    return run


def _count_schedules(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The run ids `_schedule` is called for: one call is one transaction."""
    calls: list[int] = []
    schedule = scheduling._schedule

    def counted(run_id: int, results: Sequence[attempts.Tried]) -> list[attempts.Attempt]:
        calls.append(run_id)
        return schedule(run_id, results)

    monkeypatch.setattr(scheduling, "_schedule", counted)
    return calls


def _noop_chain(length: int) -> list[dict[str, Any]]:
    return [
        {"name": f"s{n}", "type": "noop", "dependsOn": [f"s{n - 1}"] if n else []}
        for n in range(length)
    ]


def test_a_noop_chain_takes_two_statements_whatever_its_length(
    sent: list[tuple[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first chain statement records the first step and claims the second, and returns
    the run's pending steps; the second step's success runs the next eight ahead of their
    claim and the second chain statement records all nine and claims the last, whose success
    ends the run. Was one statement per step (ten for eleven steps) until the steps run
    ahead (docs/engine.md, "Steps run ahead of their claim")."""
    short = _run("one", _noop_chain(1), cluster="a")
    long = _run("eleven", _noop_chain(11), cluster="b")
    with CaptureQueriesContext(connection) as one_step:
        scheduling.advance(short.pk)
    commits = _count_schedules(monkeypatch)
    chained = _count_chain_records(monkeypatch)
    with CaptureQueriesContext(connection) as eleven_steps:
        scheduling.advance(long.pk)
    one = _statements(wf.without_heartbeat(one_step))
    eleven = _statements(wf.without_heartbeat(eleven_steps))
    assert len(eleven) == len(one) + 2, eleven
    # The run is scheduled (under its lock) when it starts; no step's code runs inside a
    # transaction (attempts.run checks).
    assert commits == [long.pk]
    steps = {s.name: s for s in StepRun.objects.filter(run=long)}
    assert chained == [steps["s0"].pk, steps["s1"].pk]
    assert {s.state for s in steps.values()} == {"succeeded"}
    assert all(s.started_at and s.finished_at for s in steps.values())
    # A step run ahead was never claimed: no lease token was handed out for it.
    assert [steps[f"s{n}"].claims for n in range(11)] == [1, 1] + [0] * 8 + [1]
    assert Run.objects.get(pk=long.pk).state == "succeeded"


def test_steps_run_ahead_are_written_only_if_each_is_still_as_their_code_saw_it(
    sent: list[tuple[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An operator skips a step after the chain ran it ahead and before its statement: none
    of the steps run ahead is written (the skip stands), and the run goes on as if none had
    run: the steps are claimed and run again in their turn."""
    run = _run("five", _noop_chain(5))
    run_ahead = attempts._run_ahead
    written: list[int] = []

    def then_skip(tried: attempts.Tried) -> list[attempts.Ahead]:
        ahead = run_ahead(tried)
        if ahead and not written:
            assert [step.name for step, *_ in ahead] == ["s2", "s3"]
            actions.step_skip(run_id=run.pk, step_name="s2", actor="ops", reason="not needed")
        written.extend(step.pk for step, *_ in ahead)
        return ahead

    monkeypatch.setattr(attempts, "_run_ahead", then_skip)
    scheduling.advance(run.pk)
    steps = {s.name: s for s in StepRun.objects.filter(run=run)}
    assert {n: s.state for n, s in steps.items()} == {
        "s0": "succeeded",
        "s1": "succeeded",
        "s2": "skipped",
        "s3": "succeeded",
        "s4": "succeeded",
    }
    assert steps["s2"].message == "skipped by an operator"
    # s3 was run ahead and not written; it was claimed in its turn (the run's scheduling,
    # since s2's skip, not the chain, made it due).
    assert steps["s3"].claims == 1
    assert Run.objects.get(pk=run.pk).state == "succeeded"


def test_routine_step_progress_writes_no_events_but_run_transitions_do(
    sent: list[tuple[str, Any]],
) -> None:
    run = _run("chain", _noop_chain(3))
    scheduling.advance(run.pk)
    events = RunEvent.objects.filter(run=run).order_by("id")
    assert [(e.step_name, e.name) for e in events] == [
        ("", "pending->running"),
        ("", "running->succeeded"),
    ]
    assert all(s.started_at and s.finished_at for s in StepRun.objects.filter(run=run))


def test_a_repeated_poll_updates_only_its_step(
    sent: list[tuple[str, Any]], now: list[datetime.datetime], on_commit: Any
) -> None:
    # Polls 3 s apart: they come by countdown (a long wait's by batch, see test_polls.py).
    # Not a `wait`: on the one clock (workflows.clock) a timer is over whenever it is due,
    # so it is never polled twice.
    steps = [{"name": "w", "type": "count_poll", "with": {"every": 3, "polls": 3}}]
    run = _run("poller", steps)
    with on_commit(execute=True):
        scheduling.advance(run.pk)
        scheduling.run_step(StepRun.objects.get(run=run).pk)  # its first poll
    step = StepRun.objects.get(run=run)
    assert (step.state, sent[-1]) == ("waiting", ("run_step_later", (step.pk,)))
    before = Run.objects.filter(pk=run.pk).values().get()
    events = RunEvent.objects.count()
    assert step.due_at is not None
    now[0] = step.due_at + datetime.timedelta(seconds=1)

    with on_commit(execute=True), CaptureQueriesContext(connection) as queries:
        scheduling.run_step(step.pk)
    writes = r"(?:UPDATE|INSERT INTO) (workflows_\w+)"
    written = [table for sql in wf.without_heartbeat(queries) for table in re.findall(writes, sql)]
    # The claim, and the poll recorded by lease: both of the step's row only.
    assert written == ["workflows_steprun", "workflows_steprun"], written
    assert RunEvent.objects.count() == events, "a poll writes no RunEvent"
    assert Run.objects.filter(pk=run.pk).values().get() == before, "a poll leaves the run alone"
    polled = StepRun.objects.get(pk=step.pk)
    assert polled.state == "waiting"
    assert polled.due_at is not None and polled.due_at > step.due_at
    assert sent[-1] == ("run_step_later", (step.pk,))


def _count_chain_records(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The steps whose success the chain's one statement records (queries.sql
    `succeed_and_claim_next`, stepstate.apply_chain)."""
    calls: list[int] = []
    chain = stepstate.apply_chain

    def counted(step: StepRun, *args: Any, **kwargs: Any) -> Any:
        calls.append(step.pk)
        return chain(step, *args, **kwargs)

    monkeypatch.setattr(stepstate, "apply_chain", counted)
    return calls


def test_a_one_wait_run_is_scheduled_when_it_starts_and_when_it_ends(
    sent: list[tuple[str, Any]],
    now: list[datetime.datetime],
    on_commit: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fleet's run (one `wait`): its start names the step and sets no wake-up, so the
    first poll is written on the step's row alone; the success of its last step is written
    with the run's end, one statement, not by the chain's statement first."""
    run = _run("timer", [{"name": "w", "type": "wait", "with": {"seconds": 3}}])
    schedules = _count_schedules(monkeypatch)
    chained = _count_chain_records(monkeypatch)
    with on_commit(execute=True), CaptureQueriesContext(connection) as first:
        scheduling.advance(run.pk)
    step = StepRun.objects.get(run=run)
    run.refresh_from_db()
    assert (step.state, step.lease_owner, step.started_at) == ("waiting", "", run.started_at)
    assert (run.message, run.wake_at) == ("workflow timer is running step w", None)
    assert schedules == [run.pk], "the first poll took no run lock"
    poll = [q["sql"] for q in first][-1]
    assert "workflows_steprun" in poll and "FOR UPDATE" not in poll
    assert sent[-1] == ("run_step_later", (step.pk,))

    # The countdown comes: the wait is over.
    StepRun.objects.filter(pk=step.pk).update(memo={"until": 0})
    assert step.due_at is not None
    now[0] = step.due_at
    with on_commit(execute=True):
        scheduling.run_step(step.pk)
    assert schedules == [run.pk]
    assert chained == []
    assert StepRun.objects.get(pk=step.pk).state == "succeeded"
    assert Run.objects.get(pk=run.pk).state == "succeeded"
    events = RunEvent.objects.filter(run=run).order_by("id")
    assert [(e.step_name, e.name, e.message) for e in events] == [
        ("", "pending->running", "workflow timer is running step w"),
        ("", "running->succeeded", ""),
    ]


def test_a_run_starts_in_one_statement_that_makes_its_steps(
    sent: list[tuple[str, Any]],
) -> None:
    """A pending run's start (queries.sql `start_run`): its move, its event and its steps in
    one statement, which returns the steps as run_steps would read them; then the claim."""
    run = _run("timer", [{"name": "w", "type": "wait", "with": {"seconds": 3600}}])
    with CaptureQueriesContext(connection) as queries:
        [claimed] = scheduling._schedule(run.pk, [])
    statements = [q["sql"] for q in queries if q["sql"].split()[0] not in ("SAVEPOINT", "RELEASE")]
    assert [q.split()[0] for q in statements] == ["SELECT", "WITH", "UPDATE"], statements
    assert "pending->running" in statements[1] and "INSERT INTO workflows_steprun" in statements[1]
    assert not any("ORDER BY s.position" in q for q in statements), "run_steps is not read"
    assert claimed.step.name == "w"
    run.refresh_from_db()
    assert (run.state, run.message) == ("running", "workflow timer is running step w")
    step = StepRun.objects.get(run=run)
    assert (step.state, step.timeout_seconds, step.lease_owner) == (
        "ready",
        claimed.step.timeout_seconds,
        claimed.lease.owner,
    )
    event = RunEvent.objects.get(run=run)
    assert (event.name, event.message) == ("pending->running", run.message)


def test_a_first_poll_after_a_chain_is_recorded_under_the_runs_lock_and_named(
    sent: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chain's statement claims the `wait` after a `noop` without writing the run's
    message, which still names the first step: its first poll goes through scheduling,
    which names the step the run now runs."""
    steps: list[dict[str, Any]] = [
        {"name": "n", "type": "noop"},
        {"name": "w", "type": "wait", "with": {"seconds": 3600}, "dependsOn": ["n"]},
    ]
    run = _run("chain", steps)
    schedules = _count_schedules(monkeypatch)
    scheduling.advance(run.pk)
    run.refresh_from_db()
    assert run.message == "workflow chain is running step w"
    assert StepRun.objects.get(run=run, name="w").state == "waiting"
    assert schedules == [run.pk, run.pk]


def test_a_started_run_is_woken_for_its_deadline_and_names_its_first_step(
    sent: list[tuple[str, Any]],
) -> None:
    template = wf.template(
        "timer",
        steps=[{"name": "w", "type": "wait", "with": {"seconds": 3600}}],
        deadlineSeconds=600,
    )
    run = _run(template, [])
    scheduling.advance(run.pk)
    run.refresh_from_db()
    assert run.deadline_at is not None
    assert (run.state, run.wake_at) == ("running", run.deadline_at)
    assert run.message == "workflow timer is running step w"


def test_a_waiting_run_is_left_to_its_steps_due_time(sent: list[tuple[str, Any]]) -> None:
    run = _run("timer", [{"name": "w", "type": "wait", "with": {"seconds": 3600}}])
    scheduling.advance(run.pk)
    run.refresh_from_db()
    assert (run.state, run.wake_at) == ("running", None)
    assert run.message == "workflow timer is running step w"


def test_the_reconciler_sends_an_overdue_run_once_and_not_its_steps_too(
    sent: list[tuple[str, Any]], now: list[datetime.datetime], on_commit: Any
) -> None:
    timer = wf.template("timer", steps=[{"name": "w", "type": "wait", "with": {"seconds": 5}}])
    overdue, waiting = _run(timer, [], "a"), _run(timer, [], "b")
    scheduling.advance(overdue.pk)
    scheduling.advance(waiting.pk)
    # Both steps' retry countdowns were lost; one run also has a finished step to schedule.
    # (Due waiting steps are the batch poller's: see test_polls.py.)
    StepRun.objects.update(state=StepRun.State.READY)
    Run.objects.filter(pk=overdue.pk).update(wake_at=now[0])
    sent.clear()
    now[0] = now[0] + datetime.timedelta(seconds=3600)

    with on_commit(execute=True):
        report = reconciler.reconcile()

    step_b = StepRun.objects.get(run=waiting).pk
    assert report == reconciler.ReconcileReport(runs=1, steps=1)
    assert sorted(sent) == [("advance", overdue.pk), ("run_step", step_b)]


def test_a_retried_run_is_due_for_the_reconciler_if_its_wake_up_is_lost(
    sent: list[tuple[str, Any]], now: list[datetime.datetime]
) -> None:
    run = runs.make_run(state=Run.State.FAILED, steps=(("snapshot", "noop", "failed"),))
    actions.run_retry(run_id=run.pk, actor="ops:ann", reason="storage is back")
    now[0] = now[0] + datetime.timedelta(seconds=3600)
    assert reconciler.reconcile().runs == 1


@pytest.mark.parametrize(("concurrency", "woken"), [(None, False), (1, True)])
def test_a_finished_run_wakes_its_templates_pending_runs_only_for_a_budget(
    sent: list[tuple[str, Any]], on_commit: Any, concurrency: int | None, woken: bool
) -> None:
    template = wf.template("backup", steps=_noop_chain(1), concurrency=concurrency)
    first, second = _run(template, [], "a"), _run(template, [], "b")
    with on_commit(execute=True):
        scheduling.advance(first.pk)
    assert Run.objects.get(pk=first.pk).state == "succeeded"
    assert (("advance", second.pk) in sent) is woken


def test_a_run_failed_at_its_deadline_and_retried_gets_its_full_time_again(
    sent: list[tuple[str, Any]], now: list[datetime.datetime]
) -> None:
    template = wf.template(
        "timer",
        steps=[{"name": "w", "type": "wait", "with": {"seconds": 3600}}],
        deadlineSeconds=600,
        onDeadline="Fail",
    )
    run = _run(template, [])
    scheduling.advance(run.pk)
    now[0] = now[0] + datetime.timedelta(seconds=601)
    scheduling.advance(run.pk)
    run.refresh_from_db()
    assert run.state == "failed"
    assert answers.render(run, now[0]).status == "Failure"

    actions.run_retry(run_id=run.pk, actor="ops:ann", reason="the backup store is back")

    run.refresh_from_db()
    assert (run.state, run.deadline_exceeded) == ("running", False)
    assert run.deadline_at == now[0] + datetime.timedelta(seconds=600)
    answer = answers.render(run, now[0] + datetime.timedelta(seconds=599))
    assert (answer.status, answer.retry_after) == ("Success", 1), "its deadline is 1 s away"


def test_parallel_steps_one_runs_here_and_the_other_is_sent_at_once(
    sent: list[tuple[str, Any]], on_commit: Any
) -> None:
    """Independent steps start together: the worker runs the first due one itself and
    sends the other, which it promoted in the same transaction (not left for the
    reconciler)."""
    run = _run("pair", [{"name": "a", "type": "tracked"}, {"name": "b", "type": "tracked"}])
    with on_commit(execute=True):
        [claimed] = scheduling._schedule(run.pk, [])
    other = StepRun.objects.get(run=run, name="b" if claimed.step.name == "a" else "a")
    assert other.state == "ready"
    assert ("run_step", other.pk) in sent


def _last_step_done(run: Run, now: list[datetime.datetime]) -> attempts.Tried:
    """The run's one `wait` step, past its first poll, claimed (as its run's last step) and
    attempted once its timer is over: its outcome is Done, not recorded yet."""
    step = StepRun.objects.get(run=run)
    StepRun.objects.filter(pk=step.pk).update(memo={"until": 0})
    assert step.due_at is not None
    now[0] = step.due_at
    [attempt] = attempts.claim(step_ids=[step.pk])
    assert attempt.last
    return attempts.run(attempt)


def test_the_last_steps_success_after_the_deadline_goes_through_its_runs_scheduling(
    sent: list[tuple[str, Any]], now: list[datetime.datetime], on_commit: Any
) -> None:
    """queries.sql `succeed_and_finish_run` writes nothing once the run's deadline has
    passed: scheduling acts on the deadline (here Fail), as it did before the success."""
    template = wf.template(
        "timer",
        steps=[{"name": "w", "type": "wait", "with": {"seconds": 3}}],
        deadlineSeconds=600,
        onDeadline="Fail",
    )
    run = _run(template, [])
    with on_commit(execute=True):
        scheduling.advance(run.pk)
    done = _last_step_done(run, now)
    Run.objects.filter(pk=run.pk).update(deadline_at=now[0] - datetime.timedelta(seconds=1))
    with on_commit(execute=True):
        scheduling.advance(run.pk, [done])
    run.refresh_from_db()
    assert (run.state, run.deadline_exceeded) == ("failed", True)
    assert StepRun.objects.get(run=run).state == "succeeded"
    names = list(RunEvent.objects.filter(run=run).order_by("id").values_list("name", flat=True))
    assert names == ["pending->running", "deadline", "running->failed"]


def test_the_last_steps_success_ends_no_run_that_has_an_unfinished_step_again(
    sent: list[tuple[str, Any]], now: list[datetime.datetime], on_commit: Any
) -> None:
    """A step claimed as its run's last one whose run has another unfinished step by the time
    it succeeds (here one added beside it, as an operator's retry makes a failed step pending
    again) does not end the run: its success is recorded by the run's scheduling, which
    goes on with the other step."""
    run = _run("timer", [{"name": "w", "type": "wait", "with": {"seconds": 3}}])
    with on_commit(execute=True):
        scheduling.advance(run.pk)
    done = _last_step_done(run, now)
    StepRun.objects.create(run=run, name="again", position=1, type="wait", params={"seconds": 3600})
    with on_commit(execute=True):
        scheduling.advance(run.pk, [done])
    run.refresh_from_db()
    assert run.state == "running"
    states = dict(StepRun.objects.filter(run=run).values_list("name", "state"))
    assert states == {"w": "succeeded", "again": "waiting"}


def test_a_run_that_starts_with_some_of_its_steps_made_reads_them_all(
    sent: list[tuple[str, Any]],
) -> None:
    """`start_run` ignores a step row that is there already (made once); the run's steps
    are then read (run_steps), so the one it did not make is scheduled too."""
    run = _run(
        "two",
        [
            {"name": "a", "type": "wait", "with": {"seconds": 3600}},
            {"name": "b", "type": "wait", "with": {"seconds": 3600}},
        ],
    )
    StepRun.objects.create(run=run, name="a", position=0, type="wait", params={"seconds": 3600})
    claimed = scheduling._schedule(run.pk, [])
    assert [a.step.name for a in claimed] == ["a", "b"]  # `wait` is inline: both run here
    assert Run.objects.get(pk=run.pk).state == "running"


@pytest.mark.django_db(transaction=True)
def test_a_start_that_waited_for_the_budget_is_stamped_after_the_run_that_freed_its_slot(
    no_worker: None,
) -> None:
    """A start waits on its template's budget lock (queries.sql `budget_lock`) while another
    worker starts a run of it; a run may end meanwhile, and this start takes its slot. Its
    `started_at` must come after that end: stamped before the wait, the two runs seemed to
    overlap past the budget (seen once in test_worker's budget test, 3 at once with 2)."""
    template = wf.template(
        "drain", steps=[{"name": "w", "type": "wait", "with": {"seconds": 3600}}], concurrency=1
    )
    first, second = _run(template, [], "a"), _run(template, [], "b")
    scheduling.advance(first.pk)
    scheduling.advance(second.pk)
    assert Run.objects.get(pk=second.pk).state == "pending"  # no free slot
    params = connection.get_connection_params()
    with (
        psycopg.connect(**params) as other_start,
        psycopg.connect(**params, autocommit=True) as look,
    ):
        other_start.execute("SELECT pg_advisory_xact_lock(hashtext('budget:' || %s))", ["drain"])
        waiting = threading.Thread(target=_advance_in_own_connection, args=(second.pk,))
        waiting.start()
        deadline = time.monotonic() + 30
        while not look.execute(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone():
            assert time.monotonic() < deadline, "the start never waited on the budget lock"
            time.sleep(0.05)
        actions.run_cancel(run_id=first.pk, actor="ops:ann", reason="frees the slot")
        other_start.rollback()
    waiting.join(timeout=30)
    assert not waiting.is_alive()
    ended = Run.objects.get(pk=first.pk).finished_at
    started = Run.objects.get(pk=second.pk)
    assert started.state == "running"
    assert ended is not None and started.started_at is not None
    assert started.started_at >= ended


def _advance_in_own_connection(run_id: int) -> None:
    try:
        scheduling.advance(run_id)
    finally:
        connection.close()
