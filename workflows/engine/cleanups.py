"""Cleanup of stopped steps: what a step created is deleted when it fails or is cancelled.

A step that fails for good (out of retries, a permanent error, its timeout) is not called again, and
an operator's cancel or `onDeadline: Fail` moves unfinished steps to CANCELLED without calling them:
nothing else would delete their Namespaces, Pods or Jobs. So the Write that stops a step that may
have acted (one that was ever claimed: a claim starts its clock) says `cleanup`
(workflows.engine.lifecycle), and the executor sends one `workflows.step_cleanup` task for it once
the transition commits; `step_cleanup` calls the step type's `cleanup`, with no transaction open (as
a step's own code runs, invariant 8), and records a `cleanup` RunEvent saying whether it ran. A
temporary error (the API server unreachable) is retried with backoff a few times before the failure
is recorded; a lost message is not sent again.

No lock is held while the cleanup runs: an operator may retry the step meanwhile, and
the retry's objects have other names (a new generation, `StepContext.object_name`). The
task's retries carry the memo the first attempt read, so they delete what the stopped
attempt made even after such a retry reset the step's memo.
"""

from __future__ import annotations

import logging
from typing import Any

from workflows import errors
from workflows.engine import leases, messages, transitions
from workflows.models import Run, StepRun
from workflows.steps import registry

logger = logging.getLogger(__name__)

#: Further attempts of a cleanup after a temporary error (with the engine's backoff).
RETRIES = 5
#: The states whose steps are cleaned up, and what the RunEvent's reason says of each.
_REASONS: dict[str, str] = {
    StepRun.State.FAILED: "the step failed",
    StepRun.State.CANCELLED: "the step was cancelled",
}


class RetryLater(Exception):
    """The cleanup met a temporary error (the API server unreachable, 5xx, 429): try again."""

    def __init__(self, *, memo: dict[str, Any], state: str) -> None:
        super().__init__("retry the cleanup")
        #: What the next attempt cleans up after (the step's memo may have moved on).
        self.memo = memo
        self.state = state


def step_cleanup(
    step_id: int,
    *,
    retries_left: int = 0,
    memo: dict[str, Any] | None = None,
    state: str | None = None,
) -> bool:
    """Run the stopped step's cleanup; False when it no longer applies or failed.

    The first attempt (no `memo`) cleans up after the step as it is now, if it is still
    failed or cancelled. A temporary error with `retries_left` raises RetryLater, carrying
    what the next attempt needs, and records nothing yet. The last attempt records the
    failure.
    """
    step = StepRun.objects.select_related("run").filter(pk=step_id).first()
    if step is None:
        return False
    if memo is None or state is None:
        if step.state not in _REASONS:
            return False
        memo, state = dict(step.memo), str(step.state)
    step_type = registry.find(step.type)
    if step_type is None or step_type.cleanup is None:
        return False
    run = step.run
    ctx = registry.StepContext.of(run, step)
    ctx.memo = dict(memo)
    fields = {"run": run.pk, "step": step.name, "step_type": step.type}
    leases.no_transaction_open()
    try:
        step_type.cleanup(ctx)
    except errors.TemporaryError as exc:
        if retries_left <= 0:
            return _cleanup_failed(run, step, state, fields)
        logger.info(
            "step cleanup will be retried",
            extra={"action": "step_cleanup_retry", "error": exc.message, **fields},
        )
        raise RetryLater(memo=memo, state=state) from exc
    except Exception:
        return _cleanup_failed(run, step, state, fields)
    logger.info("step cleaned up", extra={"action": "step_cleanup", **fields})
    _record(run, step, state, messages.cleanup_ran(state, step.name))
    return True


def _cleanup_failed(run: Run, step: StepRun, state: str, fields: dict[str, Any]) -> bool:
    # The text of the error may name hosts or tokens: the log has it, the event not.
    logger.warning(
        "step cleanup failed", extra={"action": "step_cleanup_failed", **fields}, exc_info=True
    )
    _record(run, step, state, messages.cleanup_failed(state, step.name))
    return False


def _record(run: Run, step: StepRun, state: str, message: str) -> None:
    transitions.action_record(
        run,
        "cleanup",
        actor="hooksvc",
        reason=_REASONS.get(state, ""),
        step_name=step.name,
        message=message,
    )
