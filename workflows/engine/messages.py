"""Every deterministic message the engine writes on runs and steps, and so answers to CAPI.

CAPI copies a hook's message into the Cluster's conditions, so these hold no timestamps,
durations, counters or raw errors, and no secrets: only names, states and fixed words.
A run's history (RunEvent.message, last section) is never an answer: it may name a time.
Hints name the operator's command that moves a run on, and run exactly as printed where
hooksvc runs (`settings.MANAGE_PY`), once each `<placeholder>` is replaced (`REASON`).
Step types write their own progress and error messages (workflows/steps/).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence

from django.conf import settings

#: The longest message a run or step row keeps (their `message` columns).
MAX_LENGTH = 500
#: What a suggested command asks of the operator: every action records why.
REASON = '--reason "<why>"'


def fit(message: str) -> str:
    """`message` cut to what the row keeps."""
    return message[:MAX_LENGTH]


# --- Commands an operator is told to run ----------------------------------------------------


def command(arguments: str) -> str:
    """`manage.py arguments` as it runs where hooksvc runs."""
    return f"{settings.MANAGE_PY} {arguments}"


def retry_command(run_id: int, step: str = "") -> str:
    on_step = f" --step {step}" if step else ""
    return command(f"workflows retry {run_id}{on_step} {REASON}")


def release_command(run_id: int) -> str:
    return command(f"workflows release {run_id} {REASON}")


def approve_command(run_id: int, step: str) -> str:
    return command(f"workflows approve {run_id} --step {step} {REASON}")


def bypass_end_command(bypass_id: int) -> str:
    return command(f"workflows bypass --end {bypass_id} {REASON}")


#: A hint in a message: from its "; " to its last quoted command ("; retry it with `...`",
#: "; retry it with `...` or release the hold with `...`").
_HINT = re.compile(r";[^;`]*`[^`]*`(?:[^;`]*`[^`]*`)*")


def without_hints(message: str) -> str:
    """`message` without the commands it suggests: what a table row shows, where the whole
    command would take five lines and the row offers the action itself."""
    return _HINT.sub("", message)


# --- A run's message: what the hook answers while the run holds the lifecycle -------------


def run_starting(name: str) -> str:
    return f"workflow {name} is starting"


def run_running(name: str) -> str:
    return f"workflow {name} is running"


def run_running_step(name: str, step: str) -> str:
    return f"workflow {name} is running step {step}"


def run_waiting_at_step(name: str, waiting: str, step: str) -> str:
    """A step of a type that declares how it waits (`waiting for approval`)."""
    return f"workflow {name} is {waiting} at step {step}"


def run_waits(name: str, says: str, step: str) -> str:
    """A waiting step whose type says its own wait (registry.StepType.says_own_wait):
    "workflow W waits for the maintenance window Tue 02:00 Europe/Berlin at step S"."""
    return fit(f"workflow {name} {says} at step {step}")


#: An approval's own text in an Event is cut to this: Kubernetes caps an events.k8s.io
#: note at 1024 bytes (pkg/apis/core/validation/events.go NoteLengthLimit).
MAX_ASKS = 400


def run_awaiting_person(
    run_id: int, name: str, waiting: str, step: str, *, moment: str, asks: str
) -> str:
    """The Event on the Cluster when a run starts waiting for a person (workflows.kube.events):
    what the step asks (its `with.message`) and the command that approves it."""
    if len(asks) > MAX_ASKS:
        asks = asks[: MAX_ASKS - 3] + "..."
    asked = f': "{asks}"' if asks else ""
    return (
        f"workflow {name} is {waiting or 'waiting for approval'} at step {step} for {moment}"
        f"{asked}; approve it with `{approve_command(run_id, step)}`"
    )


def names_ways_out(reason: str) -> bool:
    """A step's failure that names its own ways on (a hint): a retry would fail again, as
    for a gate of an abandoned rollout, so no retry is suggested beside them."""
    return _HINT.search(reason) is not None


def run_failed_at_step(run_id: int, name: str, step: str, reason: str) -> str:
    head = f"workflow {name} failed at step {step}: "
    hint = f"; retry it with `{retry_command(run_id, step)}`"
    own = _HINT.search(reason)
    if own is not None:
        reason, hint = reason[: own.start()], reason[own.start() :]
    # The step's reason gives way, never the hint.
    room = MAX_LENGTH - len(head) - len(hint)
    if len(reason) > room:
        reason = reason[: max(0, room - 3)] + "..."
    return fit(head + reason + hint)


def run_cancelled(run_id: int, name: str) -> str:
    return (
        f"workflow {name} was cancelled by an operator; "
        f"retry it with `{retry_command(run_id)}` "
        f"or release the hold with `{release_command(run_id)}`"
    )


def run_superseded(name: str, by_run: int) -> str:
    """An UpdateMachine run whose Machine got a new desired spec (workflows.engine.supersede)."""
    return f"workflow {name} was cancelled: its Machine has a new desired spec, run {by_run}"


def run_superseded_reason(by_run: int, machine: str) -> str:
    return f"superseded by run {by_run}: Machine {machine} has a new desired spec"


#: How every answer a bypass gives starts (`bypassed`; hookpath.bypass.answered_by reads it).
BYPASS_PREFIX = "hooksvc bypass "


def bypass_until(moment: datetime.datetime) -> str:
    """A bypass's expiry as its answer and the CLI print it: 2026-11-24 01:00:00 UTC."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def bypassed(bypass_id: int, actor: str, expires_at: datetime.datetime, reason: str) -> str:
    """What a call a bypass covers answers: who, why and until when (the same for the same
    bypass: its expiry is a moment fixed when it was opened, not a countdown)."""
    return (
        f"{BYPASS_PREFIX}{bypass_id} by {actor} until {bypass_until(expires_at)}: "
        f"{reason}; no workflow runs for this call"
    )


def run_missed_deadline(name: str) -> str:
    return f"workflow {name} did not finish before its deadline"


def run_holding_past_deadline(name: str, message: str) -> str:
    return f"workflow {name} passed its deadline; holding: {message}"


def waiting_for_workflow(name: str, other: str) -> str:
    return f"workflow {name} is waiting for workflow {other} to finish"


def waiting_for_failed_workflow(name: str, other: str, other_run_id: int, state: str) -> str:
    return (
        f"workflow {name} is waiting for workflow {other} (run {other_run_id}), which {state}; "
        f"retry it with `{retry_command(other_run_id)}` "
        f"or release it with `{release_command(other_run_id)}`"
    )


def waiting_for_slot(name: str, limit: int) -> str:
    return f"workflow {name} is waiting for a free slot (at most {limit} at once)"


def wait_cycle(cycle: Sequence[str]) -> str:
    return f"workflows wait for each other in a cycle: {' -> '.join(cycle)}; fix their waitFor"


# --- A step's message -----------------------------------------------------------------------


def step_timed_out(seconds: int) -> str:
    return f"timed out after {seconds} s"


def step_call_timed_out(seconds: int) -> str:
    """A call of the step's code did not return within its type's bound (a temporary error)."""
    return f"the step's code did not return within {seconds} s"


def step_attempts_lost(lost: int, lost_by: str) -> str:
    """Its attempts ended without an outcome `lost` times in a row: the worker died running
    it (killed, out of memory, a step type that crashes its process). The host is the first
    part of the claimant's name (host:pid:nonce), the same for every such failure of it."""
    host = lost_by.split(":", 1)[0] or "unknown"
    return (
        f"the worker died {lost} times running this step (no attempt recorded an outcome);"
        f" last seen on host {host}"
    )


def step_unexpected_error(error: BaseException) -> str:
    # The class name only: the exception's text may hold hosts, tokens or timestamps.
    return f"unexpected error ({type(error).__name__}); see hooksvc logs"


STEP_SKIPPED = "skipped by an operator"


# --- Events of a run (RunEvent.message) -----------------------------------------------------


def cleanup_ran(state: str, step: str) -> str:
    return f"cleanup of {state} step {step} ran"


def cleanup_failed(state: str, step: str) -> str:
    return f"cleanup of {state} step {step} failed; see hooksvc logs"


def step_retrying(
    attempt: int, attempts: int, error: str, at: datetime.datetime, *, retry_for: int = 0
) -> str:
    """A RunEvent (history only, never a hook's answer: it names a time). `attempts` are the
    attempts in a row the count allows; past them, the streak goes on for `retry_for` s."""
    when = at.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    which = (
        f"attempt {attempt} of {attempts}"
        if attempt <= attempts
        else f"attempt {attempt} (failing for less than {retry_for} s)"
    )
    return fit(f"{which} failed: {error}; next attempt at {when}")
