"""The hand-written SQL of the hook path and the engine's reads and locks, and the helpers
that run statements; the statements that write a step's state, lease or attempt fields
are the one writer's (workflows.engine.stepstate).

These run where the ORM cost more CPU than PostgreSQL spent (the hook path's poll), or
where one statement must do what the ORM would do in several. Each statement's column list
is built from one tuple, which the caller also uses to name the values of a returned row.
Table names are Django's defaults for the models in workflows/models.py; the column tuples
hold names only, never input, so building the text from them is safe (values always go as
parameters).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection

from workflows.models import Run, StepRun


def columns(alias: str, names: Sequence[str]) -> str:
    """`alias.name, ...` of `names` (names only, never input)."""
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
    f"SELECT {columns('t', TEMPLATE_COLUMNS)}, {columns('r', RUN_ANSWER_COLUMNS)}, st.steps,"  # noqa: S608  # nosec B608
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
    SELECT {columns("r", SCHEDULE_RUN_COLUMNS)}
    FROM (SELECT set_config('synchronous_commit', %(commit)s, true)) AS c, workflows_run AS r
    WHERE r.id = %(run)s
    FOR UPDATE OF r
"""  # noqa: S608  # nosec B608
#: A run's steps in their order, read once its row is locked (a snapshot of their own).
#: Parameters: run. Columns: SCHEDULE_STEP_COLUMNS.
RUN_STEPS = f"""
    SELECT {columns("s", SCHEDULE_STEP_COLUMNS)} FROM workflows_steprun AS s
    WHERE s.run_id = %(run)s ORDER BY s.position
"""  # noqa: S608  # nosec B608

#: Serialises one template's starts (parameter: its name) until the transaction ends, so two
#: workers never both take the last slot of its concurrency budget.
BUDGET_LOCK = "SELECT pg_advisory_xact_lock(hashtext('budget:' || %s))"

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
