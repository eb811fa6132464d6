"""Celery tasks: thin wrappers that pass ids and call the engine. Safe to run twice.

Tasks are acknowledged late (settings: CELERY_TASK_ACKS_LATE), so a worker that dies
mid-task has its message delivered again; the engine's row locks and compare-and-set
transitions make the repeat harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from celery import shared_task

from workflows import cleanups, engine, errors, events, hookcalls, polls

logger = logging.getLogger(__name__)

#: Attempts of an Event while the API server does not answer, and the wait between them.
EVENT_RETRIES = 3
EVENT_RETRY_SECONDS = 10


def send_each(
    task: Any, calls: Iterable[tuple[Any, ...]], *, action: str, then: str, **options: Any
) -> None:
    """Send `task` once per argument tuple. With the broker down, stop and log once, naming
    every call not sent: `then` says who catches up (the reconciler, or nobody)."""
    pending = list(calls)
    for sent, args in enumerate(pending):
        try:
            if options:
                task.apply_async(args, **options)
            else:
                task.delay(*args)
        except Exception:
            unsent = [list(a) for a in pending[sent:]]
            logger.warning(
                f"broker unavailable; {then}", extra={"action": action, "unsent": unsent}
            )
            return


@shared_task(name="workflows.advance")
def advance(run_id: int) -> None:
    engine.advance(run_id)


@shared_task(name="workflows.run_step")
def run_step(step_id: int) -> None:
    engine.run_step(step_id)


@shared_task(name="workflows.step_cleanup", bind=True, max_retries=cleanups.RETRIES)
def step_cleanup(self: Any, step_id: int) -> None:
    try:
        cleanups.step_cleanup(step_id, retries_left=self.max_retries - self.request.retries)
    except cleanups.RetryLater as exc:
        raise self.retry(countdown=engine.backoff(self.request.retries + 1)) from exc


@shared_task(name="workflows.poll_due")
def poll_due() -> None:
    polls.poll_due()


@shared_task(name="workflows.reconcile")
def reconcile() -> None:
    engine.reconcile()


@shared_task(name="workflows.prune_hook_calls")
def prune_hook_calls() -> None:
    hookcalls.prune()


@shared_task(name="workflows.cluster_event", bind=True, max_retries=EVENT_RETRIES)
def cluster_event(self: Any, run_id: int, outcome: str) -> None:
    """Best effort: a run's Event is retried while the API server is away, then dropped."""
    try:
        events.emit(run_id, outcome)
    except errors.TemporaryError as exc:
        if self.request.retries < EVENT_RETRIES:
            raise self.retry(countdown=EVENT_RETRY_SECONDS) from exc
        logger.warning("cluster event dropped", extra={"action": "event_dropped", "run": run_id})
    except errors.StepError:
        logger.warning("cluster event dropped", extra={"action": "event_dropped", "run": run_id})
