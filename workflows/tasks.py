"""Celery tasks: thin wrappers that pass ids and call the engine. Safe to run twice.

Tasks are acknowledged late (settings: CELERY_TASK_ACKS_LATE), so a worker that dies
mid-task has its message delivered again; the engine's leases and compare-and-set
transitions make the repeat harmless. The engine sends these by name
(workflows.engine.dispatch), so it never imports this module.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from celery import shared_task
from celery.signals import task_postrun, worker_process_init

from workflows import errors
from workflows.engine import (
    calls,
    cleanups,
    dispatch,
    lifecycle,
    polls,
    reconciler,
    scheduling,
    stalls,
)
from workflows.hookpath import hookcalls
from workflows.kube import events

logger = logging.getLogger(__name__)

#: Attempts of an Event while the API server does not answer, and the wait between them.
EVENT_RETRIES = 3
EVENT_RETRY_SECONDS = 10


#: This process is a prefork pool process (Celery's worker_process_init ran in it).
_pool_process = False


@worker_process_init.connect
def _in_a_pool_process(**kwargs: object) -> None:
    global _pool_process
    _pool_process = True


@task_postrun.connect
def _replaced_when_overloaded(**kwargs: object) -> None:
    """A prefork pool process in which too many abandoned step calls still run (code stuck in
    C, which an asynchronous exception cannot stop) asks to be replaced, once its task is
    done: the SystemExit leaves Celery's tracer (celery/app/trace.py catches only Exception
    around task_postrun), billiard reports it and lets the process go (billiard/pool.py
    `worker`, 4.3), and the worker forks a fresh one; Celery takes the exit for a lost
    worker (celery/worker/request.py `on_failure`, 5.7) and, with acks_late,
    reject_on_worker_lost and no stored result (settings), requeues the task's message: its
    work is recorded, so running it again changes nothing. A thread pool's process (`make
    run`) keeps serving: the hooksvc_step_threads_abandoned gauge and its alert say when
    to restart it."""
    if _pool_process and calls.overloaded():
        logger.error(
            "too many abandoned step calls still run: this pool process asks to be replaced",
            extra={"action": "pool_process_replaced", "abandoned": calls.abandoned()},
        )
        raise SystemExit(0)


@contextlib.contextmanager
def _events_emitted_here() -> Iterator[None]:
    """The Cluster Events of the engine's transitions in this task, emitted by the task once
    its work is done (committed ones even if it then raised), not as messages of their own;
    those the API server did not take go to the retrying `cluster_event` task."""
    with dispatch.events_in_task() as collected:
        try:
            yield
        finally:
            dispatch.cluster_events(events.emit_for_task(collected))


@shared_task(name=dispatch.ADVANCE)
def advance(run_id: int) -> None:
    with _events_emitted_here():
        scheduling.advance(run_id)


@shared_task(name=dispatch.RUN_STEP)
def run_step(step_id: int) -> None:
    with _events_emitted_here():
        scheduling.run_step(step_id)


@shared_task(name=dispatch.STEP_CLEANUP, bind=True, max_retries=cleanups.RETRIES)
def step_cleanup(
    self: Any, step_id: int, memo: dict[str, Any] | None = None, state: str | None = None
) -> None:
    try:
        cleanups.step_cleanup(
            step_id,
            retries_left=self.max_retries - self.request.retries,
            memo=memo,
            state=state,
        )
    except cleanups.RetryLater as exc:
        raise self.retry(
            args=(step_id, exc.memo, exc.state),
            countdown=lifecycle.backoff(self.request.retries + 1),
        ) from exc


@shared_task(name=dispatch.POLL_DUE)
def poll_due() -> None:
    with _events_emitted_here():
        polls.poll_due()


@shared_task(name="workflows.reconcile")
def reconcile() -> None:
    with _events_emitted_here():
        reconciler.reconcile()
        # Its own pass: a stall is judged by the clock (the database's, which records
        # progress), not by a message or a due time.
        stalls.notice()


@shared_task(name="workflows.prune_hook_calls")
def prune_hook_calls() -> None:
    hookcalls.prune()


@shared_task(name=dispatch.CLUSTER_EVENT, bind=True, max_retries=EVENT_RETRIES)
def cluster_event(self: Any, run_id: int, outcome: str, text: str = "") -> None:
    """Best effort: a run's Event is retried while the API server is away, then dropped."""
    try:
        events.emit(run_id, outcome, text)
    except errors.TemporaryError as exc:
        if self.request.retries < EVENT_RETRIES:
            raise self.retry(countdown=EVENT_RETRY_SECONDS) from exc
        logger.warning("cluster event dropped", extra={"action": "event_dropped", "run": run_id})
    except errors.StepError:
        logger.warning("cluster event dropped", extra={"action": "event_dropped", "run": run_id})
