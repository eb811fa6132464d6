"""The benchmark database: created and migrated by the runner, seeded with COPY.

Seeding goes around the ORM (COPY is a hundred times faster than save()), so the rows are
written here in the columns' own terms; `workflows.models` is the reference for them.
"""

from __future__ import annotations

import datetime
import json
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
import redis

from bench import env

TEMPLATE = "bench-upgrade"
HOOK = "BeforeClusterUpgrade"
FROM_VERSION = "v1.30.0"
TO_VERSION = "v1.33.0"
#: The moment the load generator's calls belong to (workflows.hookpath.selection.moment_key: the
#: upgrade's target version, for BeforeClusterUpgrade).
MOMENT = TO_VERSION


def create_database() -> None:
    """CREATE DATABASE hooksvc_bench if missing, then migrate it."""
    url = urllib.parse.urlsplit(env.DATABASE_URL)
    name = url.path.lstrip("/")
    admin = url._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def flush_redis() -> None:
    """Empty the benchmarks' own Redis DB (only that one)."""
    redis.Redis.from_url(env.REDIS_URL).flushdb()


def reset() -> None:
    """Empty every workflow table."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE workflows_runevent, workflows_steprun, workflows_hookcall, workflows_run, "
            "workflows_workflowtemplate RESTART IDENTITY CASCADE"
        )
    cursor_analyze()


def cursor_analyze() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def cluster_name(i: int) -> str:
    return f"c{i:05d}"


def cluster_uid(i: int) -> str:
    return f"00000000-0000-4000-8000-{i:012d}"


def copy_rows(table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """COPY `rows` into `table`; returns how many."""
    from django.db import connection

    connection.ensure_connection()
    raw = connection.connection
    count = 0
    sql = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
    with raw.cursor() as cursor, cursor.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)
            count += 1
    if not raw.autocommit:
        raw.commit()
    return count


RUN_COLUMNS = (
    "template_id",
    "template_name",
    "template_generation",
    "spec",
    "hook",
    "cluster_key",
    "cluster_namespace",
    "cluster_name",
    "moment",
    "context",
    "state",
    "message",
    "created_at",
    "started_at",
    "finished_at",
    "deadline_at",
    "deadline_exceeded",
    "wake_at",
    "released",
)


STEP_COLUMNS = (
    "run_id",
    "name",
    "position",
    "type",
    "params",
    "depends_on",
    "timeout_seconds",
    "retries",
    "state",
    "failures",
    "started_at",
    "finished_at",
    "due_at",
    "memo",
    "output",
    "message",
    # Django's defaults are not the table's: COPY names every NOT NULL column.
    "lease_owner",
    "claims",
    "waits_for_person",
)
#: The values of the last three STEP_COLUMNS for a step no worker has claimed yet.
UNCLAIMED = ("", 0, False)


def run_row(
    *,
    template_id: int | None,
    spec: dict[str, Any],
    i: int,
    moment: str,
    state: str,
    now: datetime.datetime,
    wake_at: datetime.datetime | None = None,
    template_name: str = TEMPLATE,
) -> tuple[Any, ...]:
    finished = state in ("succeeded", "failed", "cancelled")
    message = "" if state == "succeeded" else f"workflow {template_name} is running step only"
    return (
        template_id,
        template_name,
        1,
        json.dumps(spec),
        HOOK,
        cluster_uid(i),
        "fleet",
        cluster_name(i),
        moment,
        json.dumps({"hook": HOOK}),
        state,
        message,
        now,
        now,
        now if finished else None,
        None,
        False,
        wake_at,
        False,
    )


def seed_runs(
    *, template_id: int, spec: dict[str, Any], clusters: int, runs: int, polled_only: bool
) -> int:
    """Runs for `clusters` clusters: each one's current upgrade (the moment the load polls,
    every other one still running, its step waiting) and, unless `polled_only`, older
    finished upgrades up to `runs` in all."""
    now = datetime.datetime.now(datetime.UTC)
    later = now + datetime.timedelta(days=1)

    def rows() -> Iterable[tuple[Any, ...]]:
        for i in range(clusters):
            state = "running" if i % 2 else "succeeded"
            yield run_row(
                template_id=template_id,
                spec=spec,
                i=i,
                moment=MOMENT,
                state=state,
                now=now,
                wake_at=later if state == "running" else None,
            )
        if polled_only:
            return
        for n in range(runs - clusters):
            i = n % clusters
            older = n // clusters
            yield run_row(
                template_id=template_id,
                spec=spec,
                i=i,
                moment=f"v0.{older}.0",
                state="succeeded",
                now=now,
            )

    count = copy_rows("workflows_run", RUN_COLUMNS, rows())

    def steps() -> Iterable[tuple[Any, ...]]:
        # The polled runs' step (ids 1..clusters after a reset): a running one waits a day.
        for i in range(clusters):
            running = bool(i % 2)
            yield (
                i + 1,
                "only",
                0,
                "noop",
                "{}",
                "[]",
                None,
                3,
                "waiting" if running else "succeeded",
                0,
                now,
                None if running else now,
                later if running else None,
                "{}",
                "{}",
                "",
                *UNCLAIMED,
            )

    copy_rows("workflows_steprun", STEP_COLUMNS, steps())
    cursor_analyze()
    return count
