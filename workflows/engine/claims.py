"""Claim steps by lease: the first of an attempt's two functions (workflows.engine.attempts).

`claim` leases due steps in one compare-and-set UPDATE (by id, or the batch poller's
most overdue waiting steps) and commits with the caller's transaction, or at once: each
claimed row bumps the step's claim counter, the lease's token, and names this process as
its owner until the lease's expiry: its call's bound (StepRun.call_timeout_seconds) and the
claim's own length more. Before it claims, this process makes sure its heartbeat is fresh
(workflows.engine.leases), so that no reaper takes it for dead with a lease just claimed.
`attempt_of` reads a claimed row (the chain's statement, stepstate.SUCCEED_AND_CLAIM_NEXT, claims
rows of the same shape).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from workflows import clock
from workflows.engine import leases, stepstate
from workflows.models import Run, StepRun


@dataclasses.dataclass(frozen=True)
class Attempt:
    """A claimed step (and the run columns it needs), with the lease it was claimed with."""

    run: Run
    step: StepRun
    lease: leases.Lease
    #: No other step of the run was unfinished when it was claimed: its success ends the run.
    last: bool = False


def claim(
    *,
    step_ids: Sequence[int] = (),
    limit: int = 0,
    promote: bool = False,
    lease_seconds: float | None = None,
    now: datetime.datetime | None = None,
) -> list[Attempt]:
    """Lease the claimable steps among `step_ids`, or (with `limit`) that many due waiting
    steps, most overdue first: one statement, committed with the caller's transaction.

    A step is claimable when it is ready or waiting, due, its run is running, and no
    lease holds it (or its lease has passed). Steps another attempt holds are left out.
    With `promote`, `step_ids` are pending steps whose dependencies the caller found done
    under their run's lock: they become ready and are claimed in the same statement.
    """
    if not step_ids and not limit:
        return []
    seconds = lease_seconds or settings.STEP_LEASE_SECONDS
    leases.heartbeat.beating()
    owner = leases.owner()
    now = now or clock.now()
    expires = now + datetime.timedelta(seconds=seconds)
    if limit:
        rows = stepstate.claim_due_waiting(limit, now=now, owner=owner, expires=expires)
    else:
        rows = stepstate.claim_steps(
            step_ids, now=now, owner=owner, expires=expires, promote=promote
        )
    return [attempt_of(row, owner=owner, seconds=seconds, expires=expires) for row in rows]


def attempt_of(
    row: dict[str, Any], *, owner: str, seconds: float, expires: datetime.datetime
) -> Attempt:
    row = {k: _decode_json(v) if k in stepstate.CLAIM_JSON_COLUMNS else v for k, v in row.items()}
    run = Run(
        id=row["run_id"],
        state=Run.State.RUNNING,
        **{c: row[c] for c in stepstate.CLAIM_RUN_COLUMNS},
    )
    bound = float(row["call_timeout_seconds"] or 0)
    step = StepRun(
        **{c: row[c] for c in stepstate.CLAIM_STEP_COLUMNS if c != "run_id"},
        lease_owner=owner,
        lease_expires_at=expires + datetime.timedelta(seconds=bound),
    )
    step.run = run
    lease = leases.Lease(
        step_id=step.pk, token=step.claims, owner=owner, seconds=seconds, bound=bound
    )
    return Attempt(run=run, step=step, lease=lease, last=bool(row["last"]))


def _decode_json(value: Any) -> Any:
    # jsonb comes as text through a raw cursor of Django's connection (JSONField decodes it).
    return json.loads(value) if isinstance(value, str | bytes) else value
