"""The engine's SQL: the named statements of workflows/engine/queries.sql, the hook path's
statements, and the helpers that run them.

queries.sql holds every statement of the engine (claims, records, leases, reaper, reconciler,
scheduling's lock and read), each a named block of plain SQL (`QUERIES[name]`), so that each
reads as it runs. The hook path's query stays here, its columns one tuple each, which the
hook path also uses to name the values it reads. Table names are Django's defaults for the
models in workflows/models.py; values always go as parameters.
"""

from __future__ import annotations

import json as _json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from django.db import connection

from workflows.models import StepRun


def columns(alias: str, names: Sequence[str]) -> str:
    """`alias.name, ...` of `names` (names only, never input)."""
    return ", ".join(f"{alias}.{name}" for name in names)


_BLOCK = re.compile(r"^-- name: (\w+)\n", re.MULTILINE)


def _load(path: Path) -> dict[str, str]:
    """The named statements of a .sql file: each block from its `-- name:` line to the next,
    without its comment lines (psycopg would read a placeholder named in a comment)."""
    text = path.read_text()
    names = list(_BLOCK.finditer(text))
    blocks = {
        found.group(1): text[found.end() : following.start() if following else None]
        for found, following in zip(names, [*names[1:], None], strict=True)
    }
    return {
        name: "\n".join(
            line for line in block.splitlines() if not line.lstrip().startswith("--")
        ).strip()
        for name, block in blocks.items()
    }


#: The engine's statements by name (workflows/engine/queries.sql).
QUERIES: Mapping[str, str] = _load(Path(__file__).with_name("queries.sql"))


def named(
    name: str, params: Mapping[str, Any] | None = None, *, json: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Run the named statement; each returned row as a dict by column name, the `json`
    columns decoded (jsonb comes as text through a raw cursor of Django's connection)."""
    with connection.cursor() as cursor:
        cursor.execute(QUERIES[name], params or {})
        # Read once: psycopg builds the description's column objects on each access.
        description = cursor.description
        if not description:
            return []
        names = [column.name for column in description]
        found = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    for row in found:
        for column in json:
            if isinstance(row.get(column), str | bytes):
                row[column] = _json.loads(row[column])
    return found


def count(name: str, params: Mapping[str, Any] | None = None) -> int:
    """Run the named statement; the number of rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(QUERIES[name], params or {})
        return int(cursor.rowcount)


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
