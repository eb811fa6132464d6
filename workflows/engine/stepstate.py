"""The one writer of a step's state: every change of a StepRun's state, lease and attempt
fields goes through a named function of this module, so the rules live in one place.

- `move` is a step's transition by compare-and-set (the row must still be in a state the
  caller expected, and, with a lease, still carry it, else `LeaseLost`); it ends any lease
  and records a RunEvent unless the move is routine (ROUTINE_STEP_MOVES).
- `claim_steps`, `claim_due_waiting` lease due steps (the claim counter is the token);
  `succeed_and_claim_next`, `record_first_poll` and `record_repeats` write an attempt's
  outcome by its lease in one statement each (the fast paths of workflows.engine.attempts).
- `extend_leases`, `free_leases` and `free_leases_of` are the heartbeat's and the reaper's
  (workflows.engine.leases, workflows.engine.workers); `hand_over` gives a step's memo to
  its next attempt now (an approval), ending the lease of one polling it; `make_due` wakes
  steps (a rollout's gates); `note_stalls` records a stall's notice.

Every write here ends or checks a lease, so an attempt whose step moved meanwhile finds
its lease lost and its outcome is dropped. Whether a move is allowed and what it writes
(the error budget, the next poll) is decided by workflows.engine.policy; this module only
writes. The statements are hand-written where one statement must do what the ORM would
do in several (a batch's claim and its write-back); their column lists are built from
tuples of names, never input, so building the text is safe (values go as parameters).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from workflows import clock
from workflows.engine import sql
from workflows.engine.sql import columns
from workflows.models import RunEvent, StepRun


class InvalidTransition(Exception):
    """The row was not in a state the transition starts from."""


class LeaseLost(InvalidTransition):
    """The step no longer carries the attempt's lease: it passed and was claimed again, or
    someone else (an operator, the deadline) moved the step on."""


class Held(Protocol):
    """What identifies a lease on a row (workflows.engine.leases.Lease)."""

    @property
    def token(self) -> int: ...
    @property
    def owner(self) -> str: ...


#: What ends a lease: every move of a step writes these.
LEASE_FREE = {"lease_owner": "", "lease_expires_at": None}

_S = StepRun.State
#: Step transitions the StepRun row records well enough on its own: a step's routine
#: progress (promoted, started waiting, succeeded) writes no RunEvent; the history keeps a
#: step's failures, retries, skips and cancellations, and every operator action.
ROUTINE_STEP_MOVES = frozenset(
    {
        (_S.PENDING, _S.READY),
        (_S.READY, _S.WAITING),
        (_S.READY, _S.SUCCEEDED),
        (_S.WAITING, _S.SUCCEEDED),
    }
)


def move(
    step: StepRun,
    to: str,
    *,
    allowed_from: Iterable[str],
    record: bool | None = None,
    actor: str = "",
    reason: str = "",
    lease: Held | None = None,
    **fields: Any,
) -> None:
    """Move `step` to state `to`; update `fields` too; record the transition; end any lease.

    `record` None records it unless it is routine (ROUTINE_STEP_MOVES, no actor). With
    `lease`, only an attempt holding that lease may move it (else LeaseLost).
    """
    allowed = list(allowed_from)
    changes: dict[str, Any] = {"state": to, **fields, **LEASE_FREE}
    if to in StepRun.FINISHED:
        changes.setdefault("finished_at", clock.now())
        changes.setdefault("due_at", None)
    rows = StepRun.objects.filter(pk=step.pk, state__in=allowed)
    if lease is not None:
        rows = rows.filter(claims=lease.token, lease_owner=lease.owner)
    if not rows.update(**changes):
        if lease is not None:
            raise LeaseLost(f"step {step.pk} no longer carries claim {lease.token}")
        raise InvalidTransition(f"step {step.pk} is not in {allowed}")
    previous = step.state
    for key, value in changes.items():
        setattr(step, key, value)
    if record is None:
        record = bool(actor) or (previous, to) not in ROUTINE_STEP_MOVES
    if record and previous != to:
        RunEvent.objects.create(
            run_id=step.run_id,
            step_name=step.name,
            kind=RunEvent.Kind.TRANSITION,
            name=f"{previous}->{to}",
            actor=actor,
            reason=reason,
            message=step.message,
        )


def make_due(ids: Sequence[int], at: datetime.datetime) -> int:
    """Make the steps `ids` due at `at` (an operator let their gates go on); a lease on one
    stays: its attempt is polling it and sees the change as it does. How many."""
    return StepRun.objects.filter(pk__in=list(ids)).update(due_at=at)


def note_stalls(ids: Sequence[int], at: Any) -> int:
    """Record that the stall of the steps `ids` was noticed (its Event sent) at `at` (a time,
    or the database's clock as an expression); how many."""
    return StepRun.objects.filter(pk__in=list(ids)).update(stall_noticed_at=at)


def hand_over(step: StepRun, *, memo: dict[str, Any], due_at: datetime.datetime | None) -> None:
    """Give `step` a new memo, due at `due_at`, and end any lease on it: an attempt polling
    it now finds its lease lost, and its outcome is dropped rather than written over."""
    StepRun.objects.filter(pk=step.pk).update(memo=memo, due_at=due_at, **LEASE_FREE)
    step.memo, step.due_at = memo, due_at
    step.lease_owner, step.lease_expires_at = "", None


# --- The statements: claim by lease, record by lease --------------------------------------

#: The step columns an attempt reads when it claims its step.
CLAIM_STEP_COLUMNS = (
    "id",
    "run_id",
    "name",
    "type",
    "state",
    "params",
    "timeout_seconds",
    "call_timeout_seconds",
    "retries",
    "retry_for_seconds",
    "failures",
    "failing_since",
    "started_at",
    "due_at",
    "memo",
    "output",
    "message",
    "claims",
)
#: The run columns an attempt reads: not its spec (large).
CLAIM_RUN_COLUMNS = ("context", "hook", "cluster_namespace", "cluster_name", "template_name")
#: What every claim returns: the step's columns, its run's, and whether the step is the
#: last unfinished one of its run (see `_last`).
CLAIM_COLUMNS = (*CLAIM_STEP_COLUMNS, *CLAIM_RUN_COLUMNS, "last")
#: The JSON columns of both, which a raw cursor returns as text.
CLAIM_JSON_COLUMNS = frozenset({"params", "memo", "output", "context"})

#: A lease lasts its call's bound and the claim's own length (`expires`): an attempt returns
#: by its bound (workflows.engine.calls), so no write extends the lease while the step's code
#: runs; only an outcome that waits past it to be recorded is extended (the heartbeat).
_EXPIRES = "%(expires)s + make_interval(secs => coalesce({step}.call_timeout_seconds, 0))"

#: A step is claimable when it is due, its lease is free or has passed, and its run runs.
_CLAIMABLE = """
    {step}.state IN ('ready', 'waiting') AND {step}.due_at <= %(now)s
    AND ({step}.lease_owner = '' OR {step}.lease_expires_at <= %(now)s)
    AND {run}.state = 'running'
"""

#: The last column every claim returns: no other step of the claimed step's run is
#: unfinished (`other`: one more step id to count as finished, as the statement that
#: claims it records that one). Its success then ends the run, so the attempt records it
#: in the scheduling transaction that finishes the run, not in a statement of its own
#: first; a stale answer only picks the longer path, never a wrong outcome.
_LAST = """NOT EXISTS (
        SELECT 1 FROM workflows_steprun AS o WHERE o.run_id = {step}.run_id
        AND o.id <> {step}.id AND o.id <> {other} AND o.state NOT IN ('succeeded', 'skipped')
    )"""


def _last(step: str, other: str = "0") -> str:
    return _LAST.format(step=step, other=other)


def _claim(ids: str, selection: str = "") -> str:
    """Lease the steps `ids` names in one compare-and-set UPDATE; return what attempts need.

    The claimable condition is checked again on each row as updated: a row that another
    claim leased meanwhile (it waited for that transaction) is left out. The ids are an
    array, so that the plan looks each step up by its primary key: `IN (SELECT ...)` of an
    unnest let the planner scan every due step instead (measured, 2026-11-24).
    """
    return f"""
        {selection}
        UPDATE workflows_steprun AS s
        SET lease_owner = %(owner)s, lease_expires_at = {_EXPIRES.format(step="s")},
            claims = s.claims + 1
        FROM workflows_run AS r
        WHERE r.id = s.run_id AND s.id = ANY({ids})
        AND {_CLAIMABLE.format(step="s", run="r")}
        RETURNING {columns("s", CLAIM_STEP_COLUMNS)}, {columns("r", CLAIM_RUN_COLUMNS)},
            {_last("s")}
    """  # noqa: S608  # nosec B608


#: Claim the given steps (parameter `ids`) that are claimable. Parameters: ids, now, owner,
#: expires. Columns: CLAIM_COLUMNS.
CLAIM_STEPS = _claim("%(ids)s::bigint[]")

#: Promote the given pending steps (their dependencies are done: the caller holds their
#: run's lock and checked) and claim them in the same UPDATE. Parameters as CLAIM_STEPS.
CLAIM_PROMOTED = f"""
    UPDATE workflows_steprun AS s
    SET state = 'ready', due_at = %(now)s,
        lease_owner = %(owner)s, lease_expires_at = {_EXPIRES.format(step="s")},
        claims = s.claims + 1
    FROM workflows_run AS r
    WHERE r.id = s.run_id AND s.id = ANY(%(ids)s::bigint[]) AND s.state = 'pending'
    AND r.state = 'running'
    RETURNING {columns("s", CLAIM_STEP_COLUMNS)}, {columns("r", CLAIM_RUN_COLUMNS)},
        {_last("s")}
"""  # noqa: S608  # nosec B608

#: Claim up to `limit` claimable waiting steps, most overdue first (the batch poller). SKIP
#: LOCKED passes over rows another transaction holds. The selection is evaluated once (a
#: materialized CTE: as a subquery, PostgreSQL may run it again per row, and a LIMIT would
#: then claim more). Parameters: limit, now, owner, expires.
CLAIM_DUE_WAITING = _claim(
    "ARRAY(SELECT id FROM selected)",
    f"""
    WITH selected AS MATERIALIZED (
        SELECT c.id FROM workflows_steprun AS c JOIN workflows_run AS cr ON cr.id = c.run_id
        WHERE c.state = 'waiting' AND {_CLAIMABLE.format(step="c", run="cr")}
        ORDER BY c.due_at
        LIMIT %(limit)s
        FOR UPDATE OF c SKIP LOCKED
    )
    """,  # noqa: S608  # nosec B608
)

#: One statement for the common step of a chain: lock the run (it must be running), record
#: a step's success by lease, and promote and claim the pending steps of the given (inline)
#: types that this success makes due, every other dependency done. A dependent it cannot
#: promote alone (another dependency recorded meanwhile) is left to the run's scheduling.
#: Parameters: run, commit (synchronous_commit: on or off), id, token, owner, memo and
#: output (JSON text), started_at, finished_at, now, expires, inline. Returns no row when
#: the run is not running; else one row per claimed step, or one with NULL step columns:
#: the number of steps recorded (1, or 0 when the lease was lost), CLAIM_COLUMNS.
SUCCEED_AND_CLAIM_NEXT = f"""
    WITH locked AS MATERIALIZED (
        SELECT r.id, {columns("r", CLAIM_RUN_COLUMNS)},
            set_config('synchronous_commit', %(commit)s, true)
        FROM workflows_run AS r WHERE r.id = %(run)s AND r.state = 'running'
        FOR UPDATE OF r
    ), recorded AS (
        UPDATE workflows_steprun AS s
        SET state = 'succeeded', memo = %(memo)s::jsonb, output = %(output)s::jsonb,
            message = '', started_at = %(started_at)s, finished_at = %(finished_at)s,
            due_at = NULL, lease_owner = '', lease_expires_at = NULL
        FROM locked
        WHERE s.id = %(id)s AND s.run_id = locked.id AND s.claims = %(token)s
        AND s.lease_owner = %(owner)s AND s.state IN ('ready', 'waiting')
        RETURNING s.id, s.name, s.run_id
    ), promoted AS (
        UPDATE workflows_steprun AS p
        SET state = 'ready', due_at = %(now)s, lease_owner = %(owner)s,
            lease_expires_at = %(expires)s, claims = p.claims + 1
        FROM recorded
        WHERE p.run_id = recorded.run_id AND p.state = 'pending'
        AND p.type = ANY(%(inline)s::text[]) AND p.depends_on ? recorded.name
        AND NOT EXISTS (
            SELECT 1 FROM jsonb_array_elements_text(p.depends_on) AS d(name)
            WHERE d.name <> recorded.name AND NOT EXISTS (
                SELECT 1 FROM workflows_steprun AS q
                WHERE q.run_id = p.run_id AND q.name = d.name
                AND q.state IN ('succeeded', 'skipped')
            )
        )
        RETURNING {columns("p", CLAIM_STEP_COLUMNS)}, {_last("p", "recorded.id")} AS last
    )
    SELECT (SELECT count(*) FROM recorded), {columns("promoted", CLAIM_STEP_COLUMNS)},
        {columns("locked", CLAIM_RUN_COLUMNS)}, promoted.last
    FROM locked LEFT JOIN promoted ON true
"""  # noqa: S608  # nosec B608

#: A step's first poll, when its waiting changes nothing its run shows (its type declares no
#: waiting message and waits for no person): the step moves from ready to waiting by
#: compare-and-set on its lease, its own row alone, as a repeated poll is written. Its run
#: must be running and already say what it would say afterwards (parameter run_message,
#: the message that names this step: scheduling wrote it when the step became due); else
#: nothing is written and the outcome goes through the run's scheduling transaction. No
#: scheduling decision depends on the move (both states are due), so it needs no run lock.
#: Parameters: commit (synchronous_commit: on or off), id, token, owner, due_at, memo,
#: message, output (JSON text, or NULL to keep it), started_at, run_message. Returns the
#: step's id when it was written. A poll is progress: it ends any streak of failures.
RECORD_FIRST_POLL = """
    UPDATE workflows_steprun AS s
    SET state = 'waiting', due_at = %(due_at)s, memo = %(memo)s::jsonb, message = %(message)s,
        output = COALESCE(%(output)s::jsonb, s.output), started_at = %(started_at)s,
        failures = 0, failing_since = NULL, lease_owner = '', lease_expires_at = NULL
    FROM (SELECT set_config('synchronous_commit', %(commit)s, true)) AS c, workflows_run AS r
    WHERE s.id = %(id)s AND s.claims = %(token)s AND s.lease_owner = %(owner)s
    AND s.state = 'ready' AND r.id = s.run_id AND r.state = 'running'
    AND r.message = %(run_message)s
    RETURNING s.id
"""

#: What a repeated poll writes back, by column: (name, array type, how it is written).
#: A NULL leaves the column as it is; the lease is released in the same statement.
_REPEAT_COLUMNS = (
    ("due_at", "timestamptz", "v.due_at"),
    ("memo", "jsonb", "COALESCE(v.memo, s.memo)"),
    ("message", "varchar", "COALESCE(v.message, s.message)"),
    ("output", "jsonb", "COALESCE(v.output, s.output)"),
    ("started_at", "timestamptz", "COALESCE(s.started_at, v.started_at)"),
)
#: The arrays RECORD_REPEATS takes, in order: step ids, their tokens, then one per column.
RECORD_REPEAT_ARRAYS = ("id", "claims", *(name for name, _, _ in _REPEAT_COLUMNS))

#: Record repeated polls of waiting steps (and hand back unpolled ones) in one statement,
#: only where the row still carries the attempt's lease (token and owner); the rows are
#: locked in id order first, as operators lock a run's steps, so the two never deadlock.
#: Parameters: one array per RECORD_REPEAT_ARRAYS, the owner. Returns the ids written.
RECORD_REPEATS = f"""
    WITH v AS (
        SELECT * FROM unnest(%s::bigint[], %s::bigint[], {
    ", ".join(f"%s::{kind}[]" for _, kind, _ in _REPEAT_COLUMNS)
}) AS v({", ".join(RECORD_REPEAT_ARRAYS)})
    ), locked AS MATERIALIZED (
        SELECT s.id FROM workflows_steprun AS s JOIN v ON v.id = s.id
        WHERE s.claims = v.claims AND s.lease_owner = %s AND s.state = 'waiting'
        ORDER BY s.id FOR UPDATE OF s
    )
    UPDATE workflows_steprun AS s SET
        {", ".join(f"{name} = {value}" for name, _, value in _REPEAT_COLUMNS)},
        lease_owner = '', lease_expires_at = NULL
    FROM v WHERE s.id = v.id AND s.id IN (SELECT id FROM locked)
    RETURNING s.id
"""  # noqa: S608  # nosec B608

#: Extend this process' leases (the heartbeat), skipping rows another transaction holds.
#: Parameters: step ids, their tokens, the new expiries, the owner. Rows locked in id order.
EXTEND_LEASES = """
    WITH v AS (
        SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[])
            AS v(id, claims, expires)
    ), locked AS MATERIALIZED (
        SELECT s.id FROM workflows_steprun AS s JOIN v ON v.id = s.id
        WHERE s.claims = v.claims AND s.lease_owner = %s
        ORDER BY s.id FOR UPDATE OF s SKIP LOCKED
    )
    UPDATE workflows_steprun AS s SET lease_expires_at = v.expires
    FROM v WHERE s.id = v.id AND s.id IN (SELECT id FROM locked)
"""

#: End this process' leases whose outcomes it could not record (the heartbeat), where the
#: row still carries them. Parameters: step ids, their tokens, the owner.
FREE_LEASES = """
    UPDATE workflows_steprun AS s SET lease_owner = '', lease_expires_at = NULL
    FROM unnest(%s::bigint[], %s::bigint[]) AS v(id, claims)
    WHERE s.id = v.id AND s.claims = v.claims AND s.lease_owner = %s
"""


#: Free the leases the dead processes held (claimed steps are due, so they are among the due
#: index's rows). Parameters: owners. Returns each freed step's id and state.
FREE_LEASES_OF = """
    UPDATE workflows_steprun AS s SET lease_owner = '', lease_expires_at = NULL
    WHERE s.state IN ('ready', 'waiting') AND s.lease_owner = ANY(%(owners)s::text[])
    RETURNING s.id, s.state
"""


# --- The named writes ------------------------------------------------------------------------


def claim_steps(
    ids: Sequence[int],
    *,
    now: datetime.datetime,
    owner: str,
    expires: datetime.datetime,
    promote: bool = False,
) -> list[dict[str, Any]]:
    """Lease the claimable steps among `ids` (with `promote`: pending steps whose
    dependencies the caller found done, which become ready); CLAIM_COLUMNS of each."""
    params = {"ids": list(ids), "now": now, "owner": owner, "expires": expires}
    return sql.rows(CLAIM_PROMOTED if promote else CLAIM_STEPS, params, CLAIM_COLUMNS)


def claim_due_waiting(
    limit: int, *, now: datetime.datetime, owner: str, expires: datetime.datetime
) -> list[dict[str, Any]]:
    """Lease up to `limit` claimable waiting steps, most overdue first; CLAIM_COLUMNS."""
    params = {"limit": limit, "now": now, "owner": owner, "expires": expires}
    return sql.rows(CLAIM_DUE_WAITING, params, CLAIM_COLUMNS)


def succeed_and_claim_next(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Record a success by lease and claim the inline steps it makes due (see
    SUCCEED_AND_CLAIM_NEXT for the parameters); rows of "recorded" and CLAIM_COLUMNS."""
    return sql.rows(SUCCEED_AND_CLAIM_NEXT, params, ["recorded", *CLAIM_COLUMNS])


def record_first_poll(params: Mapping[str, Any]) -> bool:
    """Move a step from ready to waiting by its lease, its row alone (see
    RECORD_FIRST_POLL for the parameters); whether it was written."""
    return bool(sql.fetch(RECORD_FIRST_POLL, params))


def record_repeats(columns: Mapping[str, Sequence[Any]], owner: str) -> set[int]:
    """Write repeated polls back by lease (one array per RECORD_REPEAT_ARRAYS, in order);
    the ids written."""
    arrays = [list(columns[name]) for name in RECORD_REPEAT_ARRAYS]
    return {row["id"] for row in sql.rows(RECORD_REPEATS, [*arrays, owner], ["id"])}


def extend_leases(
    ids: Sequence[int], tokens: Sequence[int], expires: Sequence[datetime.datetime], owner: str
) -> int:
    """Move the expiry of the leases `owner` still holds; how many."""
    return sql.execute(EXTEND_LEASES, [list(ids), list(tokens), list(expires), owner])


def free_leases(ids: Sequence[int], tokens: Sequence[int], owner: str) -> int:
    """End the leases `owner` still holds (outcomes it could not record); how many."""
    return sql.execute(FREE_LEASES, [list(ids), list(tokens), owner])


def free_leases_of(owners: Sequence[str]) -> list[tuple[int, str]]:
    """End every lease the dead processes `owners` held; each freed step's id and state."""
    return [(int(i), str(state)) for i, state in sql.fetch(FREE_LEASES_OF, {"owners": owners})]
