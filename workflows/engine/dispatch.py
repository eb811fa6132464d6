"""Every message the engine sends to the broker, each sent once its transaction commits.

Messages go by task name (`workflows.tasks` registers the tasks under these names), so
the engine never imports the tasks module: tasks call the engine, never the other way.
Each function may be called inside a transaction (the message leaves after the commit,
and not at all after a rollback) or outside one (it leaves at once); only `next_batch`,
which names no row, never waits. With the broker
down, a send stops at the first failure and logs once, naming every message not sent and
who catches up: the reconciler for runs and steps, nobody for best-effort messages.

Cluster Events are the exception: in a worker's engine task (`events_in_task`, which
workflows.tasks wraps around each) they are collected and emitted by the task itself once
its work is done, not sent as messages of their own: they were two of a run's four
messages, and each message costs the worker's main process two Redis MULTIs (delivery and
acknowledgement) and a child its publish (py-spy: docs/performance.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.db import transaction

from hooksvc.celery import app

logger = logging.getLogger(__name__)

ADVANCE = "workflows.advance"
RUN_STEP = "workflows.run_step"
POLL_DUE = "workflows.poll_due"
STEP_CLEANUP = "workflows.step_cleanup"
CLUSTER_EVENT = "workflows.cluster_event"


def _broker_send(name: str, args: tuple[Any, ...], countdown: float | None) -> None:
    app.send_task(name, args=args, countdown=countdown)


#: Test seam: replaced to record (or run) messages instead of sending them to the broker.
broker: Callable[[str, tuple[Any, ...], float | None], None] = _broker_send


def advance(run_ids: Iterable[int]) -> None:
    """Ask a worker to advance these runs; if the broker is down the reconciler will."""
    _after_commit(
        ADVANCE,
        [(run_id,) for run_id in run_ids],
        action="wake_failed",
        then="the reconciler will start the run",
    )


def run_steps(step_ids: Iterable[int]) -> None:
    """Ask workers to attempt these due steps, one message each."""
    _after_commit(
        RUN_STEP,
        [(step_id,) for step_id in step_ids],
        action="enqueue_failed",
        then="the reconciler will run the step",
    )


def poll_step(step_id: int, after: float) -> None:
    """Attempt this step again in `after` seconds (a retry, or a wait too short to batch)."""
    _after_commit(
        RUN_STEP,
        [(step_id,)],
        action="enqueue_failed",
        then="the reconciler will poll the step",
        countdown=after,
    )


def next_batch() -> None:
    """Another batch of due waiting steps, at once (the last one was full).

    Sent without waiting for a commit: the message names no row, and the batch that asks
    for it has committed its claim already.
    """
    _send(POLL_DUE, [()], "enqueue_failed", "beat will start the next batch", None)


def step_cleanups(step_ids: Iterable[int]) -> None:
    """Run these steps' cleanup (their type's `cleanup`) in the workflows.step_cleanup task."""
    _after_commit(
        STEP_CLEANUP,
        [(step_id,) for step_id in step_ids],
        action="step_cleanup_enqueue_failed",
        then="step cleanup not sent",
    )


#: What `cluster_event` announces besides a run's start and end (workflows.kube.events).
AWAITING_APPROVAL = "awaiting_approval"


#: The Events of the engine task running in this thread (events_in_task), or None.
_task_events: contextvars.ContextVar[list[tuple[Any, ...]] | None] = contextvars.ContextVar(
    "task_events", default=None
)


def cluster_event(run_id: int, outcome: str, text: str = "") -> None:
    """Record the run's outcome as an Event on its Cluster (`text`: its message, when the
    engine writes it); best effort. After the commit: collected for the engine task that
    runs this (events_in_task), else sent as a `workflows.cluster_event` message."""
    args = (run_id, outcome, text) if text else (run_id, outcome)

    def committed() -> None:
        collected = _task_events.get()
        if collected is None:
            cluster_events([args])
        else:
            collected.append(args)

    transaction.on_commit(committed)


def cluster_events(calls: list[tuple[Any, ...]]) -> None:
    """Send these Events (cluster_event's arguments) as messages now: the task retries them
    while the API server is away."""
    _send(CLUSTER_EVENT, calls, "event_enqueue_failed", "cluster event not sent", None)


@contextlib.contextmanager
def events_in_task() -> Iterator[list[tuple[Any, ...]]]:
    """Collect the Cluster Events the engine asks for in this block (each once its
    transaction commits) instead of sending them; the caller emits them."""
    collected: list[tuple[Any, ...]] = []
    token = _task_events.set(collected)
    try:
        yield collected
    finally:
        _task_events.reset(token)


def _after_commit(
    name: str,
    calls: list[tuple[Any, ...]],
    *,
    action: str,
    then: str,
    countdown: float | None = None,
) -> None:
    if calls:
        transaction.on_commit(lambda: _send(name, calls, action, then, countdown))


def _send(
    name: str, calls: list[tuple[Any, ...]], action: str, then: str, countdown: float | None
) -> None:
    for sent, args in enumerate(calls):
        try:
            broker(name, args, countdown)
        except Exception:
            unsent = [list(a) for a in calls[sent:]]
            logger.warning(
                f"broker unavailable; {then}",
                extra={"action": action, "task": name, "unsent": unsent},
            )
            return
