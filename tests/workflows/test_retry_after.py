"""retryAfterSeconds is the time until the run's state can next change, in [1, the template's].

CAPI does not call a blocking hook again before the retryAfterSeconds of its last answer runs
out (kubernetes-sigs/cluster-api util/cache/cache.go HookEntry.ShouldRequeue, and the
callers in exp/topology/desiredstate/lifecycle_hooks.go): every second above the time the
work needs holds the cluster for nothing, and an answer below it only costs a call.
"""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from django.test import override_settings

from hooksvc.contract import catalog
from tests.support import workflows as wf
from workflows.definitions import typed
from workflows.engine import scheduling
from workflows.hookpath import answers, retry
from workflows.hookpath.retry import StepTimes
from workflows.models import Run
from workflows.steps import registry

NOW = datetime.datetime(2026, 11, 23, 12, 0, 0, tzinfo=datetime.UTC)
SPEC = typed.Template(hook="BeforeClusterUpgrade", retry_after_seconds=30)


def at(seconds: float) -> datetime.datetime:
    return NOW + datetime.timedelta(seconds=seconds)


def step(
    state: str = "waiting",
    type_: str = "wait",
    due_in: float | None = None,
    started: float | None = -1.0,
    timeout: int | None = None,
) -> StepTimes:
    return StepTimes(
        state=state,
        person=registry.waits_for_person(type_),
        due_at=at(due_in) if due_in is not None else None,
        started_at=at(started) if started is not None else None,
        timeout_seconds=timeout,
    )


def answer(
    *steps: StepTimes,
    state: str = "running",
    spec: typed.Template = SPEC,
    wake_in: float | None = None,
    deadline_in: float | None = None,
    deadline_exceeded: bool = False,
    late: float = 0.0,
    linger: float = 0.0,
) -> int:
    change = retry.next_change(
        state=state,
        wake_at=at(wake_in) if wake_in is not None else None,
        deadline_at=at(deadline_in) if deadline_in is not None else None,
        deadline_exceeded=deadline_exceeded,
        steps=steps,
        now=NOW,
    )
    return retry.seconds(
        change, person=retry.awaiting_person(steps), spec=spec, now=NOW, late=late, linger=linger
    )


def test_a_wait_step_answers_the_seconds_until_it_ends_not_the_templates_value() -> None:
    """A 3 s wait with retryAfterSeconds 30: CAPI comes back just after it ends."""
    assert answer(step(due_in=2.9)) == 4, "2.9 s, a countdown's margin, rounded up"
    assert answer(step(due_in=0.5)) == 1


def test_a_polling_step_answers_its_next_poll_with_a_batch_periods_margin() -> None:
    """Waits of 5 s and more are polled by the batch poller, up to a beat period late."""
    with override_settings(POLL_BATCH_MIN_WAIT_SECONDS=5, POLL_BATCH_SECONDS=1):
        assert answer(step(type_="backup_pvs", due_in=8.0)) == 10, "8 s + 1 s + margin"
        assert answer(step(type_="backup_pvs", due_in=3.0)) == 4, "a countdown, not a batch"


def test_a_retry_answers_its_backoff() -> None:
    assert answer(step(state="ready", type_="http", due_in=6.2, started=-20)) == 7


def test_a_due_step_answers_one_second() -> None:
    """The engine is about to act: come back as soon as CAPI may."""
    assert answer(step(state="ready", type_="noop", due_in=0.0)) == 1
    assert answer(step(due_in=-0.2)) == 1


def test_an_overdue_step_answers_about_as_long_as_the_engine_is_late() -> None:
    """A backlog or a broker outage: calls thin out instead of coming every second."""
    assert answer(step(due_in=-3.5)) == 4
    assert answer(step(due_in=-300.0)) == 30
    assert answer(state="pending", wake_in=-6.0) == 6, "a run not started for 6 s"


def test_never_above_the_templates_retry_after_seconds() -> None:
    assert answer(step(type_="conformance", due_in=120.0)) == 30


def test_a_steps_timeout_comes_first_when_it_is_sooner_than_its_next_poll() -> None:
    timing_out = step(type_="k8s_job", due_in=25.0, started=-95.0, timeout=100)
    assert answer(timing_out) == 6, "the timeout in 5 s, plus the margin"


def test_the_runs_deadline_comes_first_when_it_is_sooner() -> None:
    assert answer(step(type_="conformance", due_in=25.0), deadline_in=7.5) == 8
    after = step(type_="conformance", due_in=25.0)
    assert answer(after, deadline_in=-5, deadline_exceeded=True) == 27, "past it: the next poll"
    assert answer(after, deadline_in=-5) == 27, "past it, before the engine has recorded it"


def test_a_run_waiting_for_a_person_answers_the_templates_value() -> None:
    approval = step(type_="approval", due_in=290.0)
    assert answer(approval) == 30
    shorter = dataclasses.replace(SPEC, approval_retry_after_seconds=5)
    assert answer(approval, spec=shorter) == 5


def test_an_approval_beside_a_working_step_answers_the_working_step() -> None:
    both = (step(type_="approval", due_in=290.0), step(type_="wait", due_in=2.0))
    assert answer(*both) == 3


def test_a_pending_run_answers_its_next_start_check() -> None:
    assert answer(state="pending", wake_in=0.0) == 1, "new: the worker starts it now"
    assert answer(state="pending", wake_in=4.5) == 5, "waiting for a slot, looked at again"


def test_nothing_known_answers_the_templates_value() -> None:
    """A pending run with no start check due says nothing yet."""
    assert answer(state="pending") == 30


def test_a_running_run_with_no_step_due_is_being_settled_and_answers_one_second() -> None:
    """Its last step's outcome is recorded and the engine is settling the run (its next
    steps or its end) in the next transaction: not the template's 30 s."""
    assert answer(state="running") == 1
    assert linger(
        retry.next_change(
            state="running",
            wake_at=None,
            deadline_at=None,
            deadline_exceeded=False,
            steps=(),
            now=NOW,
        )
    ) == pytest.approx(retry.SETTLE_SECONDS)


@pytest.mark.django_db
def test_several_runs_answer_the_soonest_change_as_capi_combines_extensions(
    sent: list[tuple[str, object]],
) -> None:
    """Two templates hold one hook: a run waiting on a 2 s `wait` and one waiting for a
    person; the answer is the lower, as CAPI takes the lowest non-zero retryAfterSeconds
    of its extensions (internal/runtime/client/client.go, aggregateSuccessfulResponses)."""
    wf.template("backup", steps=[{"name": "settle", "type": "wait", "with": {"seconds": 2}}])
    wf.template("approve", steps=[{"name": "ok", "type": "approval"}], retryAfterSeconds=30)
    first = answers.answer(wf.call(), handler_name="test")
    assert first.retry_after == 1, (
        "both runs are due to start; the approval's may change as it starts (the wait's: 2 s)"
    )
    assert first.linger_until is None, "a run not started yet is answered at once, not held"
    for run in Run.objects.all():
        scheduling.advance(run.pk)

    both = answers.answer(wf.call(), handler_name="test")
    assert both.retry_after == 2, (
        "the wait's end (2 s) and a margin, rounded down for a lingering call; not the "
        "approval's 30"
    )
    assert both.message == (
        "workflow approve is waiting for approval at step ok; "
        "workflow backup is running step settle"
    ), "the messages do not move with the number"
    Run.objects.filter(template_name="backup").update(state="succeeded")
    assert answers.answer(wf.call(), handler_name="test").retry_after == 30


@pytest.mark.django_db
def test_a_template_can_answer_faster_while_a_run_waits_for_approval(
    sent: list[tuple[str, object]],
) -> None:
    """approvalRetryAfterSeconds: an approval is seen sooner, for more calls."""
    wf.template(
        "approve",
        steps=[{"name": "ok", "type": "approval"}],
        retryAfterSeconds=30,
        approvalRetryAfterSeconds=5,
    )
    answers.answer(wf.call(), handler_name="test")
    scheduling.advance(Run.objects.get().pk)
    assert answers.answer(wf.call(), handler_name="test").retry_after == 5


# --- The engine behind as a whole -------------------------------------------------------------


def test_a_step_not_reached_yet_answers_as_late_as_the_engine_is_when_it_is_behind() -> None:
    """A backlog: the oldest due work is 20 s late. A step due now (or a run due to start)
    comes after it, so CAPI is asked to come back in about 20 s, not every second."""
    with override_settings(POLL_BATCH_SECONDS=1):
        assert answer(step(state="ready", type_="noop", due_in=0.0), late=20.0) == 20
        assert answer(state="pending", wake_in=0.0, late=20.0) == 20, "a new run, not started"
        assert answer(step(due_in=3.0), late=20.0) == 23, "its own wait, then the backlog"
        assert answer(step(due_in=-3.5), late=20.0) == 20, "overdue behind older work"
        assert answer(step(due_in=3.0), late=300.0) == 30, "never above the template's"


def test_the_engines_usual_lag_is_not_a_backlog() -> None:
    """A batch poll comes up to a beat period after its step is due: not behind."""
    with override_settings(POLL_BATCH_SECONDS=1):
        assert not retry.engine_behind(1.0)
        assert retry.engine_behind(1.5)
        assert answer(step(due_in=2.9), late=1.0) == 4, "as if it kept up"


# --- Linger -------------------------------------------------------------------------------


def test_with_linger_the_answer_is_rounded_down_to_land_at_the_change_not_after_it() -> None:
    """retryAfterSeconds is an int32 of seconds (cluster-api api/runtime/hooks/v1alpha1/
    common_types.go, CommonRetryResponse): rounded up, CAPI comes back up to a second after
    the change; rounded down, at most the margin before it, and that call lingers."""
    assert answer(step(due_in=2.9)) == 4
    assert answer(step(due_in=2.9), linger=1.0) == 3, "2.9 s + 0.25 s margin, rounded down"
    assert answer(step(due_in=2.6), linger=1.0) == 2, "CAPI comes 0.6 s early and lingers"
    assert answer(step(due_in=0.5), linger=1.0) == 1, "never below 1"
    with override_settings(POLL_BATCH_MIN_WAIT_SECONDS=5, POLL_BATCH_SECONDS=1):
        batched = step(type_="backup_pvs", due_in=8.0)
        assert answer(batched, linger=1.0) == 8, (
            "8 s + half the window, down: CAPI comes as it is due and lingers through the beat"
        )
        assert answer(step(due_in=2.9), linger=1.0, late=20.0) == 23, "behind: no rounding"


def linger(change: retry.Change | None, late: float = 0.0, window: float = 1.0) -> float | None:
    at = retry.linger_until(change, now=NOW, late=late, window=window)
    return None if at is None else (at - NOW).total_seconds()


def test_a_call_lingers_until_just_after_a_change_due_within_the_window() -> None:
    countdown = retry.Change(at(0.6), retry.ENGINE_MARGIN_SECONDS)
    assert linger(countdown) == pytest.approx(0.6 + retry.SETTLE_SECONDS)
    assert linger(retry.Change(at(1.5), retry.ENGINE_MARGIN_SECONDS)) is None, "too far"
    assert linger(countdown, window=0.0) is None, "HOOKSVC_HOOK_LINGER_SECONDS=0"


def test_a_batch_poll_due_already_lingers_for_its_beat_not_after_its_margin() -> None:
    """A batched poll comes up to a beat period after it is due: a call that finds it due
    re-reads at once, within its margin; past its margin the engine is late: no linger."""
    batched = retry.Change(at(-0.4), 1.25)
    assert linger(batched) == 0.0
    assert linger(retry.Change(at(-2.0), 1.25)) is None


def test_no_linger_while_the_engine_is_behind_or_only_a_person_can_change_the_run() -> None:
    with override_settings(POLL_BATCH_SECONDS=1):
        assert linger(retry.Change(at(0.5), 0.25), late=20.0) is None
    assert linger(None) is None, "an approval: nothing the engine will do"


def test_several_runs_linger_only_if_every_one_is_about_to_change() -> None:
    soon, later = at(0.3), at(0.8)
    one = answers.Answer(catalog.Status.SUCCESS, "a", 1, linger_until=soon)
    two = answers.Answer(catalog.Status.SUCCESS, "b", 1, linger_until=later)
    busy = answers.Answer(catalog.Status.SUCCESS, "c", 20)
    assert answers.combine([one, two]).linger_until == later, "until the last of them"
    assert answers.combine([one, busy]).linger_until is None, "one would still hold"
    assert answers.combine([one, answers.PROCEED]).linger_until == soon, "a finished run"


def test_a_batched_step_keeps_its_beat_margin_once_it_is_due() -> None:
    """A 10 s wait is polled by a batch at the first beat after it is due: a call that finds
    it just due lingers through that beat, not only a countdown's margin."""
    with override_settings(POLL_BATCH_MIN_WAIT_SECONDS=5, POLL_BATCH_SECONDS=1):
        due = step(due_in=-0.5, started=-10.5)
        change = retry.next_change(
            state="running",
            wake_at=None,
            deadline_at=None,
            deadline_exceeded=False,
            steps=[due],
            now=NOW,
        )
        assert change is not None and change.margin == 1.25
        assert linger(change) == 0.0, "due: re-read now and on, within the beat"


# --- A run not started yet: the least time its template takes --------------------------------


def wait_step(name: str, seconds: float, *after: str, timeout: int | None = None) -> typed.Step:
    return typed.Step(
        name, "wait", {"seconds": seconds}, timeout_seconds=timeout, depends_on=tuple(after)
    )


def pending(
    *steps: typed.Step,
    wake_in: float = 0.0,
    deadline_in: float | None = None,
    late: float = 0.0,
    linger: float = 1.0,
    cap: int = 30,
) -> retry.Wait:
    """What a pending run of a template with `steps` answers (run_wait, as the hook path)."""
    spec = typed.Template(hook="BeforeClusterUpgrade", steps=steps, retry_after_seconds=cap)
    run = Run(
        state=Run.State.PENDING,
        spec=spec.as_spec(),
        wake_at=at(wake_in),
        deadline_at=at(deadline_in) if deadline_in is not None else None,
    )
    with override_settings(
        RETRY_AFTER="computed", HOOK_LINGER_SECONDS=linger, POLL_BATCH_SECONDS=1
    ):
        return retry.run_wait(run, (), NOW, late=late)


def test_a_new_run_whose_first_step_is_a_wait_answers_its_end_not_one_second() -> None:
    """CAPI v1.12+ keeps the answer until retryAfterSeconds runs out (util/cache/cache.go
    HookEntry.ShouldRequeue): a new run of a 4 s `wait` cannot succeed before it has started
    (now at the earliest) and waited 4 s, so CAPI is sent back then, not in 1 s for a second
    call that only learns the wait's end. Rounded down with linger: the call that comes at
    the end lingers through the engine's margin. It is still answered at once."""
    new = pending(wait_step("settle", 4))
    assert new == retry.Wait(4, None), "4 s + 0.25 s margin, rounded down; not held"
    assert pending(wait_step("settle", 4), linger=0.0).seconds == 5, "no linger: rounded up"
    assert pending(wait_step("settle", 4.6)).seconds == 4, "at or just before the end"


def test_parallel_waits_take_the_longest_path_and_sequential_ones_add() -> None:
    parallel = (wait_step("a", 3), wait_step("b", 7), typed.Step("c", "noop"))
    assert pending(*parallel).seconds == 7
    chain = (
        wait_step("a", 3),
        wait_step("b", 4, "a"),
        typed.Step("c", "http", {"url": "http://x"}, depends_on=("b",)),
    )
    assert pending(*chain).seconds == 7
    diamond = (
        typed.Step("start", "noop"),
        wait_step("short", 2, "start"),
        wait_step("long", 5, "start"),
        wait_step("after", 3, "short", "long"),
    )
    assert pending(*diamond).seconds == 8, "start, the longer branch (5), then 3"


def test_a_wait_that_times_out_first_weighs_its_timeout() -> None:
    """A step fails once it has run timeoutSeconds: the run's answer changes then."""
    assert pending(wait_step("a", 20, timeout=6)).seconds == 6


def test_a_first_step_that_is_not_a_wait_answers_one_second() -> None:
    """An approval or http step may be done at once: the run can change as it starts."""
    assert pending(typed.Step("ok", "approval"), wait_step("then", 5, "ok")).seconds == 5, (
        "the wait after it still counts: the approval may take no time"
    )
    assert pending(typed.Step("ok", "approval")).seconds == 1
    assert pending(typed.Step("call", "http", {"url": "http://x"})).seconds == 1
    assert pending(wait_step("zero", 0)).seconds == 1
    assert pending().seconds == 1, "no steps"


def test_the_least_time_is_capped_by_the_templates_retry_after_seconds() -> None:
    assert pending(wait_step("long", 600), cap=30).seconds == 30


def test_a_pending_run_behind_the_engine_adds_its_lateness_to_the_least_time() -> None:
    assert pending(wait_step("settle", 4), late=20.0).seconds == 24
    assert pending(wait_step("settle", 4), late=20.0).linger_until is None


def test_a_deadline_before_the_least_time_comes_first() -> None:
    """The answer turns at the deadline (render reads deadline_at): the earlier change."""
    assert pending(wait_step("settle", 20), deadline_in=6.0).seconds == 6
    assert pending(wait_step("settle", 4), deadline_in=9.0).seconds == 4


def test_a_run_waiting_for_a_slot_answers_the_later_of_its_start_check_and_its_least_time() -> None:
    """A blocked run looks again at wake_at (scheduling.START_RECHECK_SECONDS)."""
    assert pending(wait_step("settle", 2), wake_in=5.0).seconds == 5, "its start check"
    assert pending(wait_step("settle", 8), wake_in=5.0).seconds == 8, "its least time"
    assert pending(typed.Step("ok", "noop"), wake_in=5.0).seconds == 5, "as before"


def test_the_least_time_of_a_template_is_read_once() -> None:
    spec = typed.Template(hook="BeforeClusterUpgrade", steps=(wait_step("a", 3),))
    assert retry.least_seconds(spec) == 3.0
    assert retry._least[id(spec)] == (spec, 3.0)


def test_a_dependency_cycle_in_a_hand_edited_row_does_not_loop() -> None:
    """apply refuses cycles and unknown steps (definitions.spec); a row edited by hand may
    still have them: the path ends there, so the least time only gets shorter."""
    loop = (wait_step("a", 3, "b"), wait_step("b", 4, "a"), wait_step("c", 2, "gone"))
    assert retry.least_seconds(typed.Template(hook="BeforeClusterUpgrade", steps=loop)) >= 2
