"""Every hand-written SQL statement of the hook path and the engine, in one place.

These run where the ORM cost more CPU than PostgreSQL spent (the hook path's poll), or
where one statement must do what the ORM would do in several (a batch's claim and its
write-back). Each statement's column list is built from one tuple, which the caller also
uses to name the values of a returned row. Table names are Django's defaults for the
models in workflows/models.py; the column tuples hold names only, never input, so
building the text from them is safe (values always go as parameters).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection

from workflows.models import Run, StepRun


def _columns(alias: str, names: Sequence[str]) -> str:
    return ", ".join(f"{alias}.{name}" for name in names)


def rows(
    statement: str, params: Sequence[Any] | Mapping[str, Any], names: Sequence[str]
) -> list[dict[str, Any]]:
    """Run `statement` and name each returned row's values by `names`."""
    return [dict(zip(names, row, strict=True)) for row in fetch(statement, params)]


def fetch(statement: str, params: Sequence[Any] | Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Run `statement`; the rows it returns.

    Not prepared (Django's cursor binds on the client). Prepared, the chain's statement
    cost PostgreSQL 0.04 ms instead of 0.55, but a generic plan made while the tables were
    small (a new install, a benchmark's emptied tables) scanned them: a run cost 5.7 ms of
    PostgreSQL's CPU in its first hundred runs, 14 ms in its fourth (measured, 2026-11-24;
    docs/performance.md).
    """
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


def execute(statement: str, params: Sequence[Any] = ()) -> int:
    """Run `statement`; the number of rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return int(cursor.rowcount)


# --- The hook path --------------------------------------------------------------------------

#: A template's columns the hook path reads.
TEMPLATE_COLUMNS = ("id", "name", "spec", "generation")
#: A run's columns an answer needs (hookpath.answers.render).
RUN_ANSWER_COLUMNS = (
    "id",
    "template_name",
    "spec",
    "state",
    "message",
    "deadline_at",
    "deadline_exceeded",
    "released",
    "wake_at",
)
#: What the answer's retryAfterSeconds needs of each of a run's due steps
#: (hookpath.retry.StepTimes): times as seconds since the epoch.
STEP_TIMES_COLUMNS = ("state", "waits_for_person", "due_at", "started_at", "timeout_seconds")


def _json_values(alias: str, names: Sequence[str]) -> str:
    """The columns for json_build_array: times as seconds since the epoch."""
    return ", ".join(
        f"extract(epoch FROM {alias}.{name})" if name.endswith("_at") else f"{alias}.{name}"
        for name in names
    )


#: What the hook path needs of each break-glass bypass in force (hookpath.bypass.Active):
#: the expiry as seconds since the epoch.
BYPASS_COLUMNS = ("id", "selector", "actor", "reason", "expires_at")

#: How late (seconds) the engine's oldest due work is: a due step no attempt holds, or a run
#: due to start (NULL when none is due). Each is the first entry of a partial index
#: (workflows_step_due_idx, workflows_run_wake_idx), but under a backlog the step scan passes
#: over the steps that batches hold (0.7-9 ms measured): a web process reads it once a second
#: (workflows.hookpath.backlog), not each hook call. Parameters: now.
ENGINE_LATE = (
    "SELECT extract(epoch FROM %(now)s - least("  # noqa: S608  # nosec B608
    "(SELECT min(ds.due_at) FROM workflows_steprun ds"
    f" WHERE ds.state IN ({', '.join(repr(str(s)) for s in StepRun.DUE)})"
    " AND ds.due_at <= %(now)s AND (ds.lease_owner = '' OR ds.lease_expires_at <= %(now)s)),"
    " (SELECT min(dr.wake_at) FROM workflows_run dr"
    " WHERE dr.state = 'pending' AND dr.wake_at <= %(now)s)))"
)

#: The steady-state poll, written out: compiling the equivalent ORM query (a FilteredRelation
#: join) cost more CPU than PostgreSQL spends running it. Runs are joined by their template's
#: name, as the unique constraint (workflows_run_moment_uniq) keys them: a template deleted
#: and made again under the same name still finds its runs in this one query. Each run's due
#: steps come along as one JSON array of STEP_TIMES_COLUMNS (an index scan of its step rows),
#: so that the answer can say when the run can next change without a second query. The
#: hook's bypasses in force for the cluster's namespace come along the same way (one
#: aggregate, the same on every row; the one lasting longest first), so that break glass
#: costs no query of its own.
#: Parameters (by name): key, moment, hook, now, namespace. Columns: TEMPLATE_COLUMNS, then
#: RUN_ANSWER_COLUMNS (all NULL where the template has no run for this moment), then the
#: steps' array (NULL when none is due), then the bypasses' array (NULL when none).
TEMPLATES_AND_RUNS = (
    f"SELECT {_columns('t', TEMPLATE_COLUMNS)}, {_columns('r', RUN_ANSWER_COLUMNS)}, st.steps,"  # noqa: S608  # nosec B608
    " bp.bypasses"
    " FROM workflows_workflowtemplate t LEFT OUTER JOIN workflows_run r"
    " ON r.template_name = t.name AND r.hook = t.hook AND r.cluster_key = %(key)s"
    " AND r.moment = %(moment)s"
    " LEFT JOIN LATERAL (SELECT json_agg(json_build_array("
    f"{_json_values('s', STEP_TIMES_COLUMNS)})) AS steps"
    " FROM workflows_steprun s WHERE s.run_id = r.id"
    f" AND s.state IN ({', '.join(repr(str(s)) for s in StepRun.DUE)})) st ON true"
    " CROSS JOIN (SELECT json_agg(json_build_array("
    f"{_json_values('b', BYPASS_COLUMNS)})"
    " ORDER BY b.expires_at DESC, b.id) AS bypasses"
    " FROM workflows_bypass b WHERE b.hook = %(hook)s AND b.ended_at IS NULL"
    " AND b.expires_at > %(now)s AND b.namespace IN ('', %(namespace)s)) bp"
    " WHERE t.hook = %(hook)s ORDER BY t.name"
)
#: The columns of a hook call's record, in the order COPY_HOOK_CALLS takes them.
HOOK_CALL_COLUMNS = (
    "at",
    "hook",
    "handler",
    "cluster_key",
    "cluster_namespace",
    "cluster_name",
    "moment",
    "status",
    "retry_after",
    "message",
    "latency_ms",
)
#: The hook-call records a process buffered, in one COPY (workflows.hookpath.hookcalls).
COPY_HOOK_CALLS = f"COPY workflows_hookcall ({', '.join(HOOK_CALL_COLUMNS)}) FROM STDIN"


# --- Scheduling -----------------------------------------------------------------------------

#: The columns scheduling reads of a run and of its steps: not what only a step's own
#: attempt reads (the run's context; a step's params, memo and output, JSON to decode).
SCHEDULE_RUN_COLUMNS = tuple(
    str(f.column) for f in Run._meta.concrete_fields if f.name not in ("context",)
)
SCHEDULE_STEP_COLUMNS = tuple(
    str(f.column)
    for f in StepRun._meta.concrete_fields
    if f.name not in ("params", "memo", "output")
)

#: Lock a run's row and read it; it also sets this transaction's synchronous_commit
#: (parameter `commit`, on or off). Parameters: commit, run. Columns: SCHEDULE_RUN_COLUMNS.
#: Its steps are read by the next statement (RUN_STEPS), not joined here: under READ
#: COMMITTED, a row lock that waited for another transaction re-reads only the locked row,
#: and a joined table stays as the statement's snapshot saw it (PostgreSQL documentation,
#: "Transaction Isolation", Read Committed: "it does not see effects of those commands on
#: other rows"). A run another worker was starting would then come back running with no
#: steps, and "every step done" holds of no steps.
LOCK_RUN = f"""
    SELECT {_columns("r", SCHEDULE_RUN_COLUMNS)}
    FROM (SELECT set_config('synchronous_commit', %(commit)s, true)) AS c, workflows_run AS r
    WHERE r.id = %(run)s
    FOR UPDATE OF r
"""  # noqa: S608  # nosec B608
#: A run's steps in their order, read once its row is locked (a snapshot of their own).
#: Parameters: run. Columns: SCHEDULE_STEP_COLUMNS.
RUN_STEPS = f"""
    SELECT {_columns("s", SCHEDULE_STEP_COLUMNS)} FROM workflows_steprun AS s
    WHERE s.run_id = %(run)s ORDER BY s.position
"""  # noqa: S608  # nosec B608

#: Serialises one template's starts (parameter: its name) until the transaction ends, so two
#: workers never both take the last slot of its concurrency budget.
BUDGET_LOCK = "SELECT pg_advisory_xact_lock(hashtext('budget:' || %s))"

# --- Attempts: claim by lease, record by lease --------------------------------------------

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
#: last unfinished one of its run (see _last).
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
        RETURNING {_columns("s", CLAIM_STEP_COLUMNS)}, {_columns("r", CLAIM_RUN_COLUMNS)},
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
    RETURNING {_columns("s", CLAIM_STEP_COLUMNS)}, {_columns("r", CLAIM_RUN_COLUMNS)},
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
        SELECT r.id, {_columns("r", CLAIM_RUN_COLUMNS)},
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
        RETURNING {_columns("p", CLAIM_STEP_COLUMNS)}, {_last("p", "recorded.id")} AS last
    )
    SELECT (SELECT count(*) FROM recorded), {_columns("promoted", CLAIM_STEP_COLUMNS)},
        {_columns("locked", CLAIM_RUN_COLUMNS)}, promoted.last
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

#: This transaction's commit does not wait for the disk: a crash may lose it.
ASYNCHRONOUS_COMMIT = "SET LOCAL synchronous_commit TO OFF"

# --- Worker liveness (workflows.engine.workers) ---------------------------------------------

#: This process is alive: its heartbeat row, on the database's clock. Parameters: the owner.
WORKER_BEAT = """
    INSERT INTO workflows_workerbeat (owner, started_at, beat_at)
    VALUES (%s, statement_timestamp(), statement_timestamp())
    ON CONFLICT (owner) DO UPDATE SET beat_at = EXCLUDED.beat_at
"""

#: Whether any process' heartbeat is older than `dead` seconds: a read, each batch poll's,
#: before anything is written. Parameters: dead.
ANY_DEAD_WORKER = """
    SELECT 1 FROM workflows_workerbeat
    WHERE beat_at < statement_timestamp() - make_interval(secs => %(dead)s) LIMIT 1
"""

#: The processes whose heartbeat is older than `dead` seconds, forgotten (one reaper wins
#: each: the others find the row gone). A process that was only stalled beats again and is
#: a new row. Parameters: dead. Returns their owners.
FORGET_DEAD_WORKERS = """
    DELETE FROM workflows_workerbeat
    WHERE beat_at < statement_timestamp() - make_interval(secs => %(dead)s)
    RETURNING owner
"""

#: Free the leases the dead processes held (claimed steps are due, so they are among the due
#: index's rows). Parameters: owners. Returns each freed step's id and state.
FREE_LEASES_OF = """
    UPDATE workflows_steprun AS s SET lease_owner = '', lease_expires_at = NULL
    WHERE s.state IN ('ready', 'waiting') AND s.lease_owner = ANY(%(owners)s::text[])
    RETURNING s.id, s.state
"""
