"""The reconciler: beat runs it every RECONCILE_SECONDS to re-enqueue work whose wake-up is overdue.

A lost message (a flushed Redis, a broker outage at commit time) or a worker killed
mid-step delays a run but never loses it: the run, or its overdue ready step, is sent
again (a killed worker's step once its heartbeat is found dead, workers.reap, or its lease
has passed). One indexed query per kind.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging

from django.conf import settings
from django.db import transaction

from workflows import clock
from workflows.engine import dispatch, sql, workers
from workflows.models import Run

logger = logging.getLogger(__name__)

#: After re-enqueueing a run, the reconciler waits this long before doing it again.
REQUEUE_SECONDS = 60


@dataclasses.dataclass(frozen=True)
class ReconcileReport:
    runs: int
    steps: int


def reconcile(limit: int = 5000) -> ReconcileReport:
    """Re-enqueue runs and steps whose wake-up is overdue (a lost message, a killed worker).

    A run is due when it must be scheduled (new, waiting to start, a step just finished,
    its deadline); an overdue claimable step that no batch claims (a ready one: a lost
    countdown; a waiting one whose last attempt was not recorded) is sent on its own,
    unless its run is sent in the same pass (queries.sql `overdue_steps`). Other due
    waiting steps are left to the batch poller (workflows.engine.polls), which claims
    every one of them, lost countdown or not: a message for them too would only race the
    batch for the same poll.
    """
    # Also here, not only in the batch poller's: when every worker died, beat still runs.
    workers.reap()
    now = clock.now()
    # Work is left alone until it is this late, so the reconciler never races the countdowns.
    late = now - datetime.timedelta(seconds=settings.RECONCILE_GRACE_SECONDS)
    with transaction.atomic():
        run_ids = list(
            Run.objects.select_for_update(skip_locked=True)
            .filter(state__in=Run.ACTIVE, wake_at__lte=late)
            .order_by("wake_at")
            .values_list("pk", flat=True)[:limit]
        )
        # New runs are due at once, without the grace: their wake-up may never have been sent.
        run_ids += list(
            Run.objects.filter(state=Run.State.PENDING, started_at__isnull=True, wake_at__lte=now)
            .exclude(pk__in=run_ids)
            .values_list("pk", flat=True)[:limit]
        )
        Run.objects.filter(pk__in=run_ids).update(
            wake_at=now + datetime.timedelta(seconds=REQUEUE_SECONDS)
        )
    # A run's `advance` executes its due steps, so the steps of a run sent above are not
    # sent again (it would only be a second message for the same work).
    # A step an attempt holds is that attempt's until its lease passes.
    found = sql.named("overdue_steps", {"now": now, "late": late, "runs": run_ids, "limit": limit})
    step_ids = [row["id"] for row in found]
    dispatch.advance(run_ids)
    dispatch.run_steps(step_ids)
    if run_ids or step_ids:
        logger.info(
            "reconciler re-enqueued overdue work",
            extra={"action": "reconciled", "runs": len(run_ids), "steps": len(step_ids)},
        )
    return ReconcileReport(runs=len(run_ids), steps=len(step_ids))
