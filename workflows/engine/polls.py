"""Batched polls: a worker claims due waiting steps together and polls them in one go.

A waiting step due at least POLL_BATCH_MIN_WAIT_SECONDS ahead gets no countdown message
(lifecycle.needs_countdown); beat's `workflows.poll_due` finds it by its due_at instead.
A batch goes through the one attempt path (workflows.engine.attempts) with many steps at
once: it claims up to POLL_BATCH_SIZE due waiting steps by lease in one statement
(POLL_LEASE_SECONDS, extended by the heartbeat while the batch runs), calls each step's
function with no transaction open, and records the repeated polls in one statement, by
lease (an operator's approve, skip or cancel meanwhile ends the lease and wins). Any
other outcome (done, failure, retry, timeout) is recorded as a countdown's is, in its
run's scheduling transaction, which then advances the run; the heartbeat extends its lease
until then. A batch past half its lease hands back what it has not polled (due at once),
so it never starts a poll whose lease is about to pass. Each batch first frees the steps of
dead workers (workflows.engine.workers), so that it polls the waiting ones at once.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections import defaultdict

from django.conf import settings

from workflows import clock
from workflows.engine import attempts, dispatch, leases, lifecycle, scheduling, workers

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class BatchReport:
    claimed: int
    polled: int
    #: Steps whose poll ended them (done, or failed for good).
    finished: int


def poll_due(limit: int | None = None) -> BatchReport:
    """Claim up to `limit` due waiting steps of running runs, poll each once, record it."""
    limit = limit or settings.POLL_BATCH_SIZE
    workers.reap()
    lease_seconds = settings.POLL_LEASE_SECONDS
    now = clock.now()
    claimed = attempts.claim(limit=limit, lease_seconds=lease_seconds, now=now)
    if len(claimed) >= limit:
        # More may be due: another worker process takes the next batch meanwhile.
        dispatch.next_batch()
    stop_at = now + datetime.timedelta(seconds=lease_seconds / 2)
    results: list[attempts.Tried] = []
    with leases.heartbeat.hold([a.lease for a in claimed]):
        for attempt in claimed:
            at = clock.now()
            if at >= stop_at:
                results.append(attempts.hand_back(attempt, at=at))
            else:
                results.append(attempts.run(attempt, at=at))
        attempts.record_repeats([r for r in results if r.repeats])
    # Every other outcome moves its step: recorded under its run's lock, then the run goes on.
    moved: dict[int, list[attempts.Tried]] = defaultdict(list)
    for result in results:
        if not result.repeats:
            moved[result.attempt.run.pk].append(result)
    # A run's advance may run its next step (a helm install, minutes): the outcomes of the
    # runs after it keep their leases until they are recorded.
    with leases.heartbeat.hold([r.attempt.lease for rs in moved.values() for r in rs]):
        for run_id, outcomes in moved.items():
            scheduling.advance(run_id, outcomes)
    polled = sum(1 for r in results if r.result.outcome is not None)
    finished = sum(1 for rs in moved.values() for r in rs if lifecycle.after(r.result).finished)
    if claimed:
        logger.debug(
            "batch polled",
            extra={"action": "poll_batch", "claimed": len(claimed), "polled": polled},
        )
    return BatchReport(claimed=len(claimed), polled=polled, finished=finished)
