"""The answer to a hook call: ensure the runs it starts, then answer from their state.

`answer` is what the hook view calls: pick the matching templates, ensure one run per
template for this cluster and moment (workflows.hookpath.runs), and combine the runs'
answers as CAPI combines extensions; a break-glass bypass in force (workflows.hookpath.bypass)
answers Success instead, starting nothing. No slow work: a steady-state poll is one query.
`render` is a pure function of a run's recorded state and the clock.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Iterable, Sequence

from hooksvc.contract import catalog, wire
from workflows import clock
from workflows.definitions import typed
from workflows.engine import messages
from workflows.hookpath import backlog, bypass, retry
from workflows.hookpath import runs as hook_runs
from workflows.models import Run

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Answer:
    status: catalog.Status
    message: str = ""
    retry_after: int = 0
    #: The runs the answer comes from, for the log line that links a hook call to its runs.
    runs: tuple[int, ...] = dataclasses.field(default=(), compare=False)
    #: When the hook view should read again instead of answering: every run that holds is
    #: about to change (workflows.hookpath.retry.linger_until). None: answer now.
    linger_until: datetime.datetime | None = dataclasses.field(default=None, compare=False)


PROCEED = Answer(catalog.Status.SUCCESS)

#: How long CAPI is asked to wait when hooksvc cannot read its state store.
STORE_DOWN_RETRY_SECONDS = 10
MSG_STORE_DOWN = "hooksvc state store is unavailable; holding until it answers"
MSG_INTERNAL = "hooksvc could not process the request; see the hooksvc logs"
MSG_UNSTORABLE = "request has values the state store cannot hold"


def refused(reason: str) -> Answer:
    """A request hooksvc cannot take (bad input: wire.BadRequest's fixed words)."""
    return Answer(catalog.Status.FAILURE, reason)


def not_served(reason: str) -> Answer:
    """A request the operator's definitions give no answer to (no UpdateMachine template
    for the Machine, no upgrade policy that reaches the target): a Failure saying which,
    so that CAPI reports it and retries with backoff until an operator changes them."""
    return Answer(catalog.Status.FAILURE, reason)


#: The request's values, not the store, are at fault (wire.py should have refused them):
#: holding with "store unavailable" would wait forever for an outage that is not.
UNSTORABLE = Answer(catalog.Status.FAILURE, MSG_UNSTORABLE)
#: A bug: the request could not be processed.
INTERNAL = Answer(catalog.Status.FAILURE, MSG_INTERNAL)


def store_down(hook: catalog.Hook) -> Answer:
    """The state store does not answer: a blocking hook keeps holding (invariant 5), a
    non-blocking one fails (its caller goes on by its failurePolicy)."""
    if hook.blocking:
        return Answer(catalog.Status.SUCCESS, MSG_STORE_DOWN, STORE_DOWN_RETRY_SECONDS)
    return Answer(catalog.Status.FAILURE, MSG_STORE_DOWN)


def answer(call: wire.HookCall, *, handler_name: str, unmatched: Answer = PROCEED) -> Answer:
    """Ensure the runs `call` starts and answer from their state; `unmatched` when no
    template matches (UpdateMachine: nothing would update the Machine)."""
    templates, found, due, bypasses = hook_runs.templates_and_runs(call)
    if not templates:
        return unmatched
    covered = bypass.covering(bypasses, call)
    if covered is not None:
        # Break glass: the lifecycle proceeds and no run starts. Runs already there are left
        # as they are: the engine goes on with them, and they answer again once it is over.
        return Answer(catalog.Status.SUCCESS, bypass.message(covered))
    cycle = hook_runs.wait_cycle(templates)
    if cycle:
        # The runs would wait for each other for ever: start none and say why.
        logger.warning(
            "templates wait for each other in a cycle",
            extra={"action": "wait_cycle", "cycle": cycle, "hook": call.hook.name},
        )
        if not call.hook.blocking:
            return PROCEED
        return Answer(catalog.Status.FAILURE, messages.wait_cycle(cycle))
    runs = hook_runs.runs_ensure(templates=templates, call=call, found=found)
    run_ids = tuple(r.pk for r in runs)
    if not call.hook.blocking:
        return dataclasses.replace(PROCEED, runs=run_ids)
    now = clock.now()
    late = backlog.late()
    rendered = [render(run, now, due.get(run.template_name, ()), late=late) for run in runs]
    return dataclasses.replace(combine(rendered), runs=run_ids)


def render(
    run: Run,
    now: datetime.datetime,
    steps: Sequence[retry.StepTimes] = (),
    *,
    late: float = 0.0,
) -> Answer:
    """The answer one run gives: a pure function of its recorded state, its due `steps`,
    how `late` the engine is and the clock. Only the number (and whether to linger) moves
    with the steps and the engine (workflows.hookpath.retry)."""
    spec = typed.of(run.spec)
    name = run.template_name
    if run.released or run.state == Run.State.SUCCEEDED:
        return PROCEED
    if not spec.holds_lifecycle:
        # A background run (add-on removal under RemovePolicies): it never holds CAPI.
        return PROCEED
    past_deadline = run.deadline_exceeded or (
        run.deadline_at is not None and now >= run.deadline_at
    )
    if past_deadline and spec.on_deadline == typed.PROCEED:
        return PROCEED
    if past_deadline and spec.on_deadline == typed.FAIL:
        return Answer(catalog.Status.FAILURE, messages.run_missed_deadline(name))
    if run.state in (Run.State.FAILED, Run.State.CANCELLED):
        if spec.on_failure == typed.FAIL:
            return Answer(catalog.Status.FAILURE, run.message)
        # Only a person changes it now (retry, release): the template's value.
        return Answer(catalog.Status.SUCCESS, run.message, spec.retry_after_seconds)
    wait = retry.run_wait(run, steps, now, late=late)
    if past_deadline:
        message = messages.run_holding_past_deadline(name, run.message)
    else:
        message = run.message or messages.run_running(name)
    return Answer(catalog.Status.SUCCESS, message, wait.seconds, linger_until=wait.linger_until)


def combine(answers: Iterable[Answer]) -> Answer:
    """Combine answers the way CAPI combines extensions: any Failure fails; lowest wait wins.
    Linger only if every run that holds is about to change, until the last of them."""
    answers = list(answers)
    failures = [a for a in answers if a.status == catalog.Status.FAILURE]
    if failures:
        return Answer(catalog.Status.FAILURE, "; ".join(a.message for a in failures))
    waiting = [a for a in answers if a.retry_after > 0]
    if not waiting:
        return PROCEED
    lingers = [a.linger_until for a in waiting]
    return Answer(
        catalog.Status.SUCCESS,
        "; ".join(a.message for a in waiting),
        min(a.retry_after for a in waiting),
        linger_until=None if None in lingers else max(at for at in lingers if at is not None),
    )
