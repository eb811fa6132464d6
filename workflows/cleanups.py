"""Cleanup of cancelled steps: what a step created is deleted when its run stops early.

An operator's cancel (`actions.run_cancel`) and `onDeadline: Fail` move unfinished steps to
CANCELLED without running them again, so nothing would delete their Namespaces or Pods.
`after_cancel` enqueues one `workflows.step_cleanup` task per such step once the cancel
commits; `step_cleanup` calls the step type's `cleanup`, as the engine does for a failure,
and records a RunEvent saying whether it ran. A temporary error (the API server unreachable)
is retried with backoff a few times before the failure is recorded; a lost message is not
sent again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.db import transaction

from workflows import errors, transitions
from workflows.models import Run, StepRun
from workflows.steps import registry

logger = logging.getLogger(__name__)


def _has_cleanup(step_type: str) -> bool:
    found = registry.find(step_type)
    return found is not None and found.cleanup is not None


def after_cancel(steps: Iterable[StepRun]) -> None:
    """Once the transaction commits, clean up the steps that had started (call it inside)."""
    ids = [s.pk for s in steps if s.started_at is not None and _has_cleanup(s.type)]
    if not ids:
        return

    def send() -> None:
        from workflows import tasks

        tasks.send_each(
            tasks.step_cleanup,
            ((step_id,) for step_id in ids),
            action="step_cleanup_enqueue_failed",
            then="step cleanup not sent",
        )

    transaction.on_commit(send)


#: Further attempts of a cleanup after a temporary error (with the engine's backoff).
RETRIES = 5


class RetryLater(Exception):
    """The cleanup met a temporary error (the API server unreachable, 5xx, 429): try again."""


def step_cleanup(step_id: int, *, retries_left: int = 0) -> bool:
    """Run the cancelled step's cleanup; False when it no longer applies or failed.

    A temporary error with `retries_left` raises RetryLater and records nothing yet; the
    task sends itself again later. The last attempt records the failure.
    """
    with transaction.atomic():
        # Locked: a retry must not start (and get new object names) while this deletes.
        step = (
            StepRun.objects.select_for_update(of=("self",))
            .select_related("run")
            .filter(pk=step_id)
            .first()
        )
        if step is None or step.state != StepRun.State.CANCELLED:
            return False
        step_type = registry.find(step.type)
        if step_type is None or step_type.cleanup is None:
            return False
        run = step.run
        ctx = registry.StepContext.of(run, step)
        fields = {"run": run.pk, "step": step.name, "step_type": step.type}
        try:
            step_type.cleanup(ctx)
        except errors.TemporaryError as exc:
            if retries_left <= 0:
                return _cleanup_failed(run, step, fields)
            logger.info(
                "step cleanup will be retried",
                extra={"action": "step_cleanup_retry", "error": exc.message, **fields},
            )
            raise RetryLater from exc
        except Exception:
            # The text of the error may name hosts or tokens: the log has it, the event not.
            return _cleanup_failed(run, step, fields)
        logger.info("step cleaned up", extra={"action": "step_cleanup", **fields})
        _record(run, step, f"cleanup of cancelled step {step.name} ran")
    return True


def _cleanup_failed(run: Run, step: StepRun, fields: dict[str, Any]) -> bool:
    # The text of the error may name hosts or tokens: the log has it, the event not.
    logger.warning(
        "step cleanup failed", extra={"action": "step_cleanup_failed", **fields}, exc_info=True
    )
    _record(run, step, f"cleanup of cancelled step {step.name} failed; see hooksvc logs")
    return False


def _record(run: Run, step: StepRun, message: str) -> None:
    transitions.action_record(
        run,
        "cleanup",
        actor="hooksvc",
        reason="the step was cancelled",
        step_name=step.name,
        message=message,
    )
