"""The metrics hooksvc records as it works: hook calls in the web, steps in the worker.

Recording is a counter or histogram update in this process' memory-mapped file (see
hooksvc/multiproc.py): no query and no network, so the hook path stays fast. What is
computed at scrape time (runs by state, the queue depth) lives in hooksvc/serving/scrape.py.
"""

from __future__ import annotations

import enum

from prometheus_client import Counter, Gauge, Histogram

from hooksvc.contract import catalog
from workflows.engine import observe


class HookAnswer(enum.StrEnum):
    """How a hook call was answered, as operators think of it."""

    BLOCKED = "blocked"  #: Success with retryAfterSeconds > 0: the lifecycle waits
    PASSED = "passed"  #: Success, nothing to wait for
    FAILED = "failed"  #: Failure, including a rejected (malformed) request


HOOK_CALLS = Counter(
    "hooksvc_hook_calls",
    "Hook calls by hook, handler and answer (blocked, passed, failed).",
    ["hook", "handler", "answer"],
)
HOOK_LATENCY = Histogram(
    "hooksvc_hook_latency_seconds",
    "Time to answer a hook call, from routing to the response body.",
    ["hook"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
STEP_DURATION = Histogram(
    "hooksvc_step_duration_seconds",
    "Time from a step's first attempt to its success or final failure, by step type.",
    ["type"],
    # Steps range from a no-op to a day-long approval.
    buckets=(0.1, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0),
)
STEP_FAILURES = Counter(
    "hooksvc_step_failures",
    "Steps that failed for good (retries exhausted or a permanent error), by step type.",
    ["type"],
)
STEP_THREADS_ABANDONED = Gauge(
    "hooksvc_step_threads_abandoned",
    "Step calls abandoned at their bound whose threads still run, per worker process.",
    multiprocess_mode="livesum",
)
WATCHER_PASSES = Counter(
    "hooksvc_watcher_passes",
    "The Cluster watcher's lists and watches, by outcome (ok, failed, gone).",
    ["outcome"],
)
WATCHER_REMOVALS = Counter(
    "hooksvc_watcher_removals",
    "Deleted Clusters without a topology for which the watcher ensured removal runs.",
)
WATCHER_LAST_OK = Gauge(
    "hooksvc_watcher_last_ok_timestamp_seconds",
    "When the Cluster watcher last listed or watched Clusters successfully (Unix time).",
    multiprocess_mode="max",
)
WATCHER_DELETED = Counter(
    "hooksvc_watcher_deleted_clusters",
    "Clusters the watcher saw gone (deleted, or missing from a list), ClusterDeleted runs ensured.",
)
WATCHER_LEADER = Gauge(
    "hooksvc_watcher_leader",
    "1 while this watcher process leads (runs the watches), 0 while it stands by.",
    multiprocess_mode="max",
)
RESOURCE_PASSES = Counter(
    "hooksvc_resource_passes",
    "The resource controller's lists and watches, by kind and outcome (ok, failed, gone).",
    ["kind", "outcome"],
)
RESOURCE_WRITES = Counter(
    "hooksvc_resource_writes",
    "What the resource controller wrote: a changed spec into PostgreSQL, or a status.",
    ["kind", "what"],
)


def hook_answer(status: str, retry_after: int) -> HookAnswer:
    if status != catalog.Status.SUCCESS:
        return HookAnswer.FAILED
    return HookAnswer.BLOCKED if retry_after > 0 else HookAnswer.PASSED


def hook_answered(*, hook: str, handler: str, answer: HookAnswer, seconds: float) -> None:
    HOOK_CALLS.labels(hook=hook, handler=handler, answer=answer.value).inc()
    HOOK_LATENCY.labels(hook=hook).observe(seconds)


def step_finished(*, step_type: str, seconds: float, failed: bool) -> None:
    STEP_DURATION.labels(type=step_type).observe(max(0.0, seconds))
    if failed:
        STEP_FAILURES.labels(type=step_type).inc()


def engine_event(event: observe.Event) -> None:
    """The engine's listener (registered in hooksvc/apps.py): its events, counted."""
    if isinstance(event, observe.StepFinished):
        step_finished(step_type=event.step_type, seconds=event.seconds, failed=event.failed)
    elif isinstance(event, observe.StepThreads):
        STEP_THREADS_ABANDONED.set(event.abandoned)
