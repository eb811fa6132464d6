"""What an attempt's result does to its step: `decide`, a pure function of the result.

The rules of a step's life live here (docs/templates.md, "Timeouts and retries"): a Poll or Done is
progress and ends any streak of failures; a temporary error is retried with exponential
backoff and full jitter (or after the delay the error asks for, a 429's Retry-After) while
the step is within its error budget, and fails it only when more than `retries` attempts
failed in a row AND the streak has lasted `retry_for_seconds`; any other error fails it.
A call that did not return by its step's deadline is a permanent error, one that did not
return by its call's bound a temporary one (workflows.engine.attempts turns them into
these). `needs_countdown` says how a due step is woken: its own message, or the batch
poller. workflows.engine.attempts runs and records what this decides.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings

from workflows import errors
from workflows.engine import messages
from workflows.engine.claims import Attempt
from workflows.models import StepRun
from workflows.steps import registry

#: Backoff of failed attempts: base * 2^(n-1), capped, with full jitter.
BACKOFF_BASE_SECONDS = 2.0
BACKOFF_CAP_SECONDS = 300.0


def _full_jitter(cap: float) -> float:
    # Spreads retries; not a secret, so the standard generator is right (bandit B311).
    return random.uniform(0, cap)  # noqa: S311  # nosec B311


#: Test seam: replaced to make backoff deterministic.
jitter: Callable[[float], float] = _full_jitter


def backoff(failures: int) -> float:
    """Seconds before attempt `failures + 1`: exponential, capped, with full jitter."""
    cap = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (failures - 1))
    return max(0.5, jitter(cap))


#: Poll.on_time gets a countdown up to this far ahead: beyond, a beat is under 3% of the wait,
#: and an ETA message sits unacked so long (kombu's redis QoS.restore_visible redelivers it).
ON_TIME_MAX_SECONDS = 30.0


#: How long after a step comes due the engine has recorded its outcome and settled the run,
#: when a countdown message polls it (the worker runs it at its ETA).
ENGINE_MARGIN_SECONDS = 0.25


def acts_within(state: str, ahead: float) -> float:
    """How long after a step comes due the engine has acted on it, for a step whose due
    time was set `ahead` seconds before: a waiting step left to the batch poller (no
    countdown, needs_countdown) up to a beat period late, any other at its countdown.

    The hook path's answer adds it to a step's recorded due_at (workflows.hookpath.retry),
    so the rule of who polls a step, and how late, lives here alone. A timer's end polled
    on time by a countdown (5-30 s ahead) counts as batched: only a wider margin.
    """
    if not needs_countdown(state, ahead):
        return float(settings.POLL_BATCH_SECONDS) + ENGINE_MARGIN_SECONDS
    return ENGINE_MARGIN_SECONDS


def needs_countdown(state: str, after: float, *, on_time: bool = False) -> bool:
    """A retry and a short wait get a countdown message; a long wait is the batch poller's.

    Batched polls (workflows.engine.polls) find waiting steps by their due_at, which saves a
    message per poll but adds up to a beat period of latency: worth it only for long waits,
    and for a timer's end (`on_time`: polled once, not every few seconds) only past 30 s.
    """
    limit = ON_TIME_MAX_SECONDS if on_time else settings.POLL_BATCH_MIN_WAIT_SECONDS
    return state != StepRun.State.WAITING or after < limit


@dataclasses.dataclass(frozen=True)
class Result:
    """What one attempt came to; `outcome` None: the step was handed back unattempted."""

    attempt: Attempt
    outcome: registry.Outcome | errors.StepError | None
    #: The step's memory after the attempt (the function changes it in place).
    memo: dict[str, Any]
    #: When the attempt ran, and when the step's first attempt did.
    at: datetime.datetime
    started: datetime.datetime
    #: When the step's code returned (None: at `at`). A retry's backoff counts from here:
    #: counted from `at`, an attempt that ran longer than its backoff (a connect timeout)
    #: would be due again before its failure is even recorded.
    ended: datetime.datetime | None = None

    @property
    def repeats(self) -> bool:
        """A waiting step that polls again (or goes back unpolled): its own row only."""
        waiting = self.attempt.step.state == StepRun.State.WAITING
        return waiting and (self.outcome is None or isinstance(self.outcome, registry.Poll))


@dataclasses.dataclass(frozen=True)
class Decision:
    """What a result does to its step: the state it moves to and the columns it writes."""

    state: str
    fields: Mapping[str, Any]

    @property
    def finished(self) -> bool:
        return self.state in StepRun.FINISHED


#: What progress writes: the streak of failures, if any, is over.
PROGRESS: Mapping[str, Any] = {"failures": 0, "failing_since": None}


def decide(result: Result) -> Decision:
    """The step's next state after `result`: a pure function (the error budget included)."""
    step, outcome, at = result.attempt.step, result.outcome, result.at
    if result.repeats:
        return Decision(StepRun.State.WAITING, _poll_changes(result))
    common: dict[str, Any] = {"memo": result.memo, "started_at": result.started}
    if isinstance(outcome, registry.Done):
        return Decision(
            StepRun.State.SUCCEEDED, {**common, "output": dict(outcome.output), "message": ""}
        )
    if isinstance(outcome, registry.Poll):
        if outcome.output is not None:
            common["output"] = dict(outcome.output)
        return Decision(
            StepRun.State.WAITING,
            {
                **common,
                **PROGRESS,
                "due_at": _after(at, outcome.after),
                "message": messages.fit(outcome.message),
            },
        )
    if outcome is None:  # never: an unattempted step repeats (handed back), decided above
        raise ValueError(f"step {step.pk}: a result without an outcome moves nothing")
    failures = step.failures + 1
    # The streak began when its first failed attempt did; it lasts until this one ended.
    since = step.failing_since or at
    ended = result.ended or at
    common.update(failures=failures, failing_since=since, message=messages.fit(outcome.message))
    if outcome.output is not None:
        common["output"] = dict(outcome.output)
    if isinstance(outcome, errors.TemporaryError) and within_budget(
        step, failures=failures, lasted=(ended - since).total_seconds()
    ):
        delay = outcome.delay if outcome.delay is not None else backoff(failures)
        return Decision(StepRun.State.READY, {**common, "due_at": _after(ended, delay)})
    return Decision(StepRun.State.FAILED, common)


def within_budget(step: StepRun, *, failures: int, lasted: float) -> bool:
    """A streak of `failures` temporary errors in a row, over `lasted` seconds, may go on:
    it fails the step only past both `retries` and `retry_for_seconds`."""
    return failures <= step.retries or lasted < step.retry_for_seconds


def _after(at: datetime.datetime, seconds: float) -> datetime.datetime:
    return at + datetime.timedelta(seconds=max(0.0, seconds))


def _poll_changes(result: Result) -> dict[str, Any]:
    """The columns a repeated poll changes: the next due time, and what differs from the row.

    A waiting step has no streak of failures to end: a failed attempt makes it ready, and
    its next poll is a first one again (decided above)."""
    step, outcome, at = result.attempt.step, result.outcome, result.at
    if not isinstance(outcome, registry.Poll):  # handed back: due at once, nothing else
        return {"due_at": at}
    changes: dict[str, Any] = {"due_at": _after(at, outcome.after)}
    if result.memo != step.memo:
        changes["memo"] = result.memo
    message = messages.fit(outcome.message)
    if message != step.message:
        changes["message"] = message
    if outcome.output is not None and dict(outcome.output) != step.output:
        changes["output"] = dict(outcome.output)
    if step.started_at is None:
        changes["started_at"] = at
    return changes
