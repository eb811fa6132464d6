"""Dead workers found in seconds: the reaper frees the leases of processes that stopped beating.

Every process that holds step leases writes its WorkerBeat row every WORKER_BEAT_SECONDS
(workflows.engine.leases). `reap` forgets the processes whose row is older than WORKER_DEAD_SECONDS,
on the database's clock (hosts' clocks may differ by seconds; a lease was judged by the claiming
host's clock, but seconds matter here), frees the leases they held, and sends a message for each
freed step: a step whose attempt was not recorded is claimed alone (queries.sql `claim_due_waiting`
leaves it out of batches), so that a step that kills its worker takes no batch down with it, and
fails once that happened HOOKSVC_STEP_LOST_ATTEMPTS times in a row
(workflows.engine.lifecycle.before_call). Live workers reap on each batch poll (beat sends one every
HOOKSVC_POLL_BATCH_SECONDS, and whichever worker takes it reaps first), and beat's reconciler reaps
too, for when every worker died. With no dead process it is one read of a table of a row per live
process, and no write.
"""

from __future__ import annotations

import dataclasses
import logging

from django.conf import settings
from django.db import transaction

from workflows.engine import dispatch, sql, stepstate

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Reaped:
    #: The dead processes forgotten, and the steps whose leases they held.
    owners: list[str]
    steps: list[int]


def reap() -> Reaped:
    """Forget dead worker processes, free their steps, and wake the ready ones."""
    if not sql.named("any_dead_worker", {"dead": _dead()}):
        return Reaped(owners=[], steps=[])
    with transaction.atomic():
        owners = [row["owner"] for row in sql.named("forget_dead_workers", {"dead": _dead()})]
        freed = sorted(stepstate.free_leases_of(owners)) if owners else []
        dispatch.run_steps(freed)
    if owners:
        # A warning only when work was cut short: a worker stopped between steps held none.
        logger.log(
            logging.WARNING if freed else logging.INFO,
            "dead workers' steps freed",
            extra={
                "action": "workers_reaped",
                "owners": owners,
                "steps": freed,
            },
        )
    return Reaped(owners=owners, steps=freed)


def _dead() -> float:
    return float(settings.WORKER_DEAD_SECONDS)
