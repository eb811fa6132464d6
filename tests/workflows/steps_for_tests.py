"""Step types used by the worker tests, registered through HOOKSVC_STEP_MODULES.

`record` stands for any step with an external side effect: it creates a record named
after its run and step in Redis (the "external system") only if none exists, counts how
often its code ran, and can hold until a file appears (so a test can kill it mid-step).
`tx_probe` reports what its code sees of the engine's database connection (invariant 8).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg
import redis
from django.conf import settings
from django.db import connection

from workflows import errors
from workflows.steps import memo, registry

PREFIX = "hooksvc-test"


def client() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


@registry.step_type(
    "record",
    params={
        "holdUntilFile": registry.Param(str),
        "seconds": registry.Param((int, float), default=0),
        # Fault tests restart Redis: there the "external system" is a directory instead.
        "effectsDir": registry.Param(str),
    },
)
def record(ctx: registry.StepContext) -> registry.Outcome:
    """Creates one external record and counts executions."""
    name = ctx.object_name()
    if ctx.params.get("effectsDir"):
        return _record_in_files(Path(ctx.params["effectsDir"]), name, ctx)
    r = client()
    r.incr(f"{PREFIX}:executions:{name}")
    hold = ctx.params.get("holdUntilFile")
    if hold:
        r.set(f"{PREFIX}:holding:{name}", 1)
        deadline = time.monotonic() + 60
        while not Path(hold).exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # a slow external call, killed mid-way by the test
    # Look for what this step made before making it: SET NX is "create if absent".
    created = bool(r.set(f"{PREFIX}:effect:{name}", ctx.run_id, nx=True))
    if created:
        r.incr(f"{PREFIX}:effects-created:{name}")
    time.sleep(float(ctx.params.get("seconds", 0)))
    return registry.Done({"record": name})


def _record_in_files(root: Path, name: str, ctx: registry.StepContext) -> registry.Outcome:
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{name}.executions").open("a") as log:
        log.write("x\n")
    hold = ctx.params.get("holdUntilFile")
    deadline = time.monotonic() + 60
    while hold and not Path(hold).exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # a slow external call, killed mid-way by the test
    try:
        # O_EXCL: created only if absent, the file-system form of "look before you create".
        with (root / f"{name}.effect").open("x") as effect:
            effect.write(str(ctx.run_id))
    except FileExistsError:
        pass
    time.sleep(float(ctx.params.get("seconds", 0)))
    return registry.Done({"record": name})


@registry.step_type(
    "count_poll",
    params={
        "every": registry.Param((int, float), default=10, minimum=0),
        "polls": registry.Param(int, default=3, minimum=1),
        "end": registry.Param(str, default="done", choices=("done", "fail")),
        # Held on its second call until this file exists (a test kills the worker mid-batch).
        "holdUntilFile": registry.Param(str),
        "seconds": registry.Param((int, float), default=0),
    },
)
def count_poll(ctx: registry.StepContext) -> registry.Outcome:
    """Polls `polls` times, `every` s apart, then ends as `end` says; counts every call."""
    name = ctx.object_name()
    r = client()
    r.incr(f"{PREFIX}:calls:{name}")
    polls = int(ctx.memo.get("polls", 0)) + 1
    hold = ctx.params.get("holdUntilFile")
    if hold and polls == 2:
        r.set(f"{PREFIX}:holding:{name}", 1)
        deadline = time.monotonic() + 60
        while not Path(hold).exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # a slow external call, killed mid-way by the test
    time.sleep(float(ctx.params["seconds"]))
    ctx.memo["polls"] = polls
    if polls < ctx.params["polls"]:
        return registry.Poll(after=float(ctx.params["every"]), message=f"poll {polls}")
    if ctx.params["end"] == "fail":
        raise errors.PermanentError("the condition failed")
    return registry.Done({"polls": polls})


@registry.step_type("tx_probe", params={"seconds": registry.Param((int, float), default=0)})
def tx_probe(ctx: registry.StepContext) -> registry.Outcome:
    """Reports what a step's code sees of the engine's database connection while it runs.

    Invariant 8: no transaction open, no row lock held. Django's own view of the
    connection (`in_atomic_block`), and PostgreSQL's: the engine connection's backend as
    another connection sees it in pg_stat_activity (`idle`, with no transaction start,
    rather than `idle in transaction`), and the locks that backend holds on hooksvc's tables.
    """
    engine_conn = connection.connection  # the raw psycopg connection, None before any query
    pid = engine_conn.info.backend_pid if engine_conn is not None else None
    report: dict[str, object] = {"in_atomic_block": connection.in_atomic_block, "pid": pid}
    params = connection.get_connection_params()
    with psycopg.connect(
        dbname=params["dbname"], host=params["host"], port=params["port"], user=params["user"]
    ) as observer:
        row = observer.execute(
            "SELECT state, xact_start IS NOT NULL FROM pg_stat_activity WHERE pid = %s", [pid]
        ).fetchone()
        # A row lock (FOR UPDATE, an UPDATE) comes with a lock on its table until the
        # transaction ends: none may be held on hooksvc's tables.
        locks = observer.execute(
            "SELECT count(*) FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation"
            " WHERE l.pid = %s AND c.relname LIKE 'workflows_%%'",
            [pid],
        ).fetchone()
    report["state"], report["in_transaction"] = row if row else (None, None)
    report["table_locks"] = locks[0] if locks else None
    client().rpush(f"{PREFIX}:tx_probe:{ctx.run_id}", json.dumps(report))
    time.sleep(float(ctx.params["seconds"]))
    return registry.Done(report)


def _tracked_cleanup(ctx: registry.StepContext) -> None:
    client().incr(f"{PREFIX}:cleaned:{ctx.object_name()}")


@registry.step_type("tracked", cleanup=_tracked_cleanup)
def tracked(ctx: registry.StepContext) -> registry.Outcome:
    """Counts its calls; its cleanup counts too (a stand-in for a step that makes objects)."""
    client().incr(f"{PREFIX}:calls:{ctx.object_name()}")
    return registry.Done({"tracked": True})


@registry.step_type(
    "sign_off",
    params={"message": registry.Param(str)},
    waiting_message="waiting for sign-off",
    waits_for_person=True,
)
def sign_off(ctx: registry.StepContext) -> registry.Outcome:
    """A custom step that only a person ends, as `approval` (read from the shared memo keys)."""
    if ctx.memo.get(memo.APPROVED_BY):
        return registry.Done({"signedOffBy": ctx.memo[memo.APPROVED_BY]})
    return registry.Poll(after=600, message="waiting for sign-off")


@registry.step_type("flaky", params={"failures": registry.Param(int, default=1, minimum=0)})
def flaky(ctx: registry.StepContext) -> registry.Outcome:
    """Fails its first `failures` attempts with a temporary error, then succeeds."""
    if ctx.attempt <= ctx.params["failures"]:
        raise errors.TemporaryError(f"attempt {ctx.attempt} refused")
    return registry.Done({"attempts": ctx.attempt})
