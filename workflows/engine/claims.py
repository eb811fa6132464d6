"""Claim steps by lease: the first of an attempt's two functions (workflows.engine.attempts).

`claim` leases due steps in one compare-and-set UPDATE (queries.sql `claim_*`, by id, or the
batch poller's most overdue waiting steps) and commits with the caller's transaction, or at
once. What a claim writes is lifecycle.CLAIM_COLUMNS: the lease (this process until its call's
bound and the claim's own length), its token, one attempt not recorded yet, and the step's
clock. Before it claims, this process makes sure its heartbeat is fresh
(workflows.engine.leases), so that no reaper takes it for dead with a lease just claimed.
`attempt_of` reads a claimed row (the chain's statement claims rows of the same shape).
"""

from __future__ import annotations

import dataclasses
import datetime
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
    #: The run's pending steps (rows with params and memo), when a chain claimed this step
    #: alone and no other step of the run was unfinished: what its success may run ahead.
    left: tuple[dict[str, Any], ...] = ()


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

    With `promote`, `step_ids` are pending steps whose dependencies are done (their run's
    scheduling read so under its lock): they become ready and are claimed in one statement.
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
        rows = stepstate.claim(step_ids, now=now, owner=owner, expires=expires, promote=promote)
        # An UPDATE returns its rows in the order it found them, which moves with the table's
        # free space: run them in their template's order.
        rows = sorted(rows, key=lambda row: (row["run_id"], row["position"]))
    return [attempt_of(row, owner=owner, seconds=seconds) for row in rows]


#: The run columns a claim returns beside the step's.
RUN_COLUMNS = ("context", "hook", "cluster_namespace", "cluster_name", "template_name")
_STEP_COLUMNS = frozenset(f.attname for f in StepRun._meta.concrete_fields)


def attempt_of(
    row: dict[str, Any], *, owner: str, seconds: float, left: Sequence[dict[str, Any]] = ()
) -> Attempt:
    """The Attempt of a claimed row (a step's columns, its run's RUN_COLUMNS, `last`), and
    the run's pending steps `left` (Attempt.left)."""
    run = Run(id=row["run_id"], state=Run.State.RUNNING, **{c: row[c] for c in RUN_COLUMNS})
    step = step_of(row, run)
    bound = float(row["call_timeout_seconds"] or 0)
    lease = leases.Lease(
        step_id=step.pk, token=step.claims, owner=owner, seconds=seconds, bound=bound
    )
    return Attempt(run=run, step=step, lease=lease, last=bool(row["last"]), left=tuple(left))


def step_of(row: dict[str, Any], run: Run) -> StepRun:
    """The StepRun of a row a claim (or the chain's statement) returned, of `run`."""
    step = StepRun(**{c: v for c, v in row.items() if c in _STEP_COLUMNS})
    step.run = run
    return step
