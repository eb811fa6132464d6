"""Cleanup of cancelled steps: what a step created is deleted when its run stops early.

An operator's cancel (`actions.run_cancel`) and `onDeadline: Fail` move unfinished steps to
CANCELLED without running them again, so nothing would delete their Namespaces or Pods.
`after_cancel` enqueues one `workflows.step_cleanup` task per such step once the cancel
commits; `step_cleanup` calls the step type's `cleanup`, as the engine does for a failure,
and records a RunEvent saying whether it ran. Best effort: a lost message is not retried.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db import transaction

from workflows import transitions
from workflows.models import StepRun
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

        for step_id in ids:
            try:
                tasks.step_cleanup.delay(step_id)
            except Exception:
                logger.warning(
                    "broker unavailable; step cleanup not sent",
                    extra={"action": "step_cleanup_enqueue_failed", "step": step_id},
                )

    transaction.on_commit(send)


def step_cleanup(step_id: int) -> bool:
    """Run the cancelled step's cleanup; False when it no longer applies or failed."""
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
        ctx = registry.StepContext(
            run_id=run.pk,
            step_name=step.name,
            step_type=step.type,
            params=step.params,
            run_context=run.context,
            memo=dict(step.memo),
            attempt=step.failures + 1,
        )
        fields = {"run": run.pk, "step": step.name, "step_type": step.type}
        try:
            step_type.cleanup(ctx)
        except Exception:
            # The text of the error may name hosts or tokens: the log has it, the event not.
            logger.warning(
                "step cleanup failed",
                extra={"action": "step_cleanup_failed", **fields},
                exc_info=True,
            )
            message, ok = f"cleanup of cancelled step {step.name} failed; see hooksvc logs", False
        else:
            logger.info("step cleaned up", extra={"action": "step_cleanup", **fields})
            message, ok = f"cleanup of cancelled step {step.name} ran", True
        transitions.action_record(
            run,
            "cleanup",
            actor="hooksvc",
            reason="the step was cancelled",
            step_name=step.name,
            message=message,
        )
    return ok
