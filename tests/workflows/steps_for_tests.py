"""Step types used by the worker tests, registered through HOOKSVC_STEP_MODULES.

`record` stands for any step with an external side effect: it creates a record named
after its run and step in Redis (the "external system") only if none exists, counts how
often its code ran, and can hold until a file appears (so a test can kill it mid-step).
`tx_probe` reports what its code sees of the engine's database connections (invariant 8).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
import time
from pathlib import Path

import psycopg
import redis
from django.conf import settings
from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper

from workflows import errors
from workflows.steps import conformance, memo, registry

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
    """Reports what the engine's database connections look like while a step's code runs.

    Invariant 8: no transaction open, no row lock held. The step's code runs on a step
    thread (workflows.engine.calls) with a connection of its own, while the attempt that
    claimed the step waits on the worker's task thread with another. Every connection of
    this process is looked at (found by the garbage collector), as PostgreSQL sees it from
    another connection: `idle` with no transaction start (not `idle in transaction`), and
    no lock on hooksvc's tables. The lease heartbeat's is left out: it beats on its own
    thread meanwhile, a statement of its own.
    """
    connection.ensure_connection()  # the step's own connection, as its code would use it
    heartbeat = {t.ident for t in threading.enumerate() if t.name == "step-lease-heartbeat"}
    wrappers = [
        w
        for w in gc.get_objects()
        if isinstance(w, BaseDatabaseWrapper)
        and w.connection is not None
        and not w.connection.closed
        and getattr(w, "_thread_ident", None) not in heartbeat
    ]
    pids = sorted({w.connection.info.backend_pid for w in wrappers})
    report: dict[str, object] = {
        "in_atomic_block": connection.in_atomic_block,
        "pid": connection.connection.info.backend_pid,
        "backends": [],
    }
    params = connection.get_connection_params()
    with psycopg.connect(
        dbname=params["dbname"], host=params["host"], port=params["port"], user=params["user"]
    ) as observer:
        for pid in pids:
            row = observer.execute(
                "SELECT state, xact_start IS NOT NULL FROM pg_stat_activity WHERE pid = %s",
                [pid],
            ).fetchone()
            # A row lock (FOR UPDATE, an UPDATE) comes with a lock on its table until the
            # transaction ends: none may be held on hooksvc's tables.
            locks = observer.execute(
                "SELECT count(*) FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation"
                " WHERE l.pid = %s AND c.relname LIKE 'workflows_%%'",
                [pid],
            ).fetchone()
            state, in_transaction = row if row else (None, None)
            backend = {"pid": pid, "state": state, "in_transaction": in_transaction}
            backend["table_locks"] = locks[0] if locks else None
            report["backends"].append(backend)  # type: ignore[attr-defined]
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
    "tracked_poll",
    params={
        "every": registry.Param((int, float), default=1, minimum=0),
        "polls": registry.Param(int, default=3, minimum=1),
    },
    cleanup=_tracked_cleanup,
)
def tracked_poll(ctx: registry.StepContext) -> registry.Outcome:
    """`tracked` that takes `polls` calls, `every` s apart: a step at work on something
    that its cleanup deletes when the step is cancelled midway."""
    client().incr(f"{PREFIX}:calls:{ctx.object_name()}")
    polls = int(ctx.memo.get("polls", 0)) + 1
    ctx.memo["polls"] = polls
    if polls < ctx.params["polls"]:
        return registry.Poll(after=float(ctx.params["every"]), message=f"poll {polls}")
    return registry.Done({"polls": polls})


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


#: The call bound of `hang`: short, so that a test sees a call abandoned in seconds.
HANG_CALL_SECONDS = 2
#: How long `hang` with `inC` blocks in C (where the engine's StepStopped cannot reach it).
HANG_IN_C_SECONDS = 20


def _hang_cleanup(ctx: registry.StepContext) -> None:
    client().incr(f"{PREFIX}:cleaned:{ctx.object_name()}")


@registry.step_type(
    "hang",
    params={"untilFile": registry.Param(str), "inC": registry.Param(bool, default=False)},
    cleanup=_hang_cleanup,
    call_timeout_seconds=HANG_CALL_SECONDS,
)
def hang(ctx: registry.StepContext) -> registry.Outcome:
    """Does not return while `untilFile` is absent (a hung API call, a bug in a custom step):
    a Python loop, which the engine's StepStopped ends, or (`inC`) a wait in C, which it
    cannot end before the wait does. Counts its calls, those that came back, those stopped."""
    name = ctx.object_name()
    r = client()
    r.incr(f"{PREFIX}:calls:{name}")
    r.set(f"{PREFIX}:holding:{name}", 1)
    until = ctx.params.get("untilFile")
    try:
        if ctx.params["inC"]:
            threading.Event().wait(timeout=HANG_IN_C_SECONDS)
        while not (until and Path(until).exists()):
            time.sleep(0.05)
    except BaseException:
        r.incr(f"{PREFIX}:stopped:{name}")
        raise
    r.incr(f"{PREFIX}:returned:{name}")
    return registry.Done({"hung": False})


@registry.step_type(
    "flaky_poll",
    params={
        "polls": registry.Param(int, default=5, minimum=1),
        "every": registry.Param((int, float), default=1, minimum=0),
        # Which calls (1, 2, ...) fail with a temporary error.
        "failOn": registry.Param(list, default=[], items=registry.Param(int)),
    },
)
def flaky_poll(ctx: registry.StepContext) -> registry.Outcome:
    """Polls `polls` times, `every` s apart, and fails the calls `failOn` names with a
    temporary error (a long step whose API server blips now and then)."""
    calls = int(ctx.memo.get("calls", 0)) + 1
    ctx.memo["calls"] = calls
    client().incr(f"{PREFIX}:calls:{ctx.object_name()}")
    if calls in ctx.params["failOn"]:
        raise errors.TemporaryError(f"call {calls} refused")
    polls = int(ctx.memo.get("polls", 0)) + 1
    ctx.memo["polls"] = polls
    if polls < ctx.params["polls"]:
        return registry.Poll(after=float(ctx.params["every"]), message=f"poll {polls}")
    return registry.Done({"polls": polls, "calls": calls})


@registry.step_type(
    "stuck_poll",
    params={
        "every": registry.Param((int, float), default=0.5, minimum=0),
        "normalSeconds": registry.Param(int, default=1, minimum=0),
        # Report something new at each poll: progress, however long it takes.
        "changing": registry.Param(bool, default=False),
        # Succeed once this file exists.
        "untilFile": registry.Param(str),
    },
    # Its normal bound comes from its parameters, as `wait`'s does.
    stall_seconds=lambda params: int(params.get("normalSeconds", 1)),
)
def stuck_poll(ctx: registry.StepContext) -> registry.Outcome:
    """Polls every `every` s, saying what it waits for (the same each time unless
    `changing`), until `untilFile` exists."""
    until = ctx.params.get("untilFile")
    if until and Path(until).exists():
        return registry.Done({})
    polls = int(ctx.memo.get("polls", 0)) + 1
    ctx.memo["polls"] = polls
    client().incr(f"{PREFIX}:polls:{ctx.object_name()}")
    said = f" ({polls} polls)" if ctx.params["changing"] else ""
    return registry.Poll(
        after=float(ctx.params["every"]),
        message=f"waiting for Job {ctx.object_name()} to complete: 1 active{said}",
    )


@registry.step_type("crash", cleanup=_tracked_cleanup)
def crash(ctx: registry.StepContext) -> registry.Outcome:
    """Kills its own worker process at every attempt, before anything is recorded: a custom
    step that crashes its process, an out-of-memory kill while reading a large Pod log. Run
    only by a real worker (in the test process it would kill the tests)."""
    client().incr(f"{PREFIX}:calls:{ctx.object_name()}")
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("the process is gone")


@registry.step_type(
    "conformance_then_crash", params=conformance.PARAMS, cleanup=conformance.cleanup
)
def conformance_then_crash(ctx: registry.StepContext) -> registry.Outcome:
    """The conformance step's first attempt (its Namespace, ServiceAccount, cluster-admin
    ClusterRoleBinding and Pod), then its worker dies before the attempt records anything."""
    conformance.conformance(ctx)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("the process is gone")


#: What `scripted` attempts come to, by (run id, step name): the stateful tests set it
#: before each attempt (tests/workflows/test_lifecycle_stateful.py); else SCRIPT_DEFAULT's,
#: else a poll in a minute (a step that waits for the world).
SCRIPT: dict[tuple[int, str], registry.Outcome | errors.StepError] = {}
SCRIPT_DEFAULT: list[registry.Outcome | None] = [None]


@registry.step_type("scripted", cleanup=_tracked_cleanup)
def scripted(ctx: registry.StepContext) -> registry.Outcome:
    """Comes to what the test says (a poll, done, a temporary or permanent error)."""
    outcome = SCRIPT.pop((ctx.run_id, ctx.step_name), None) or SCRIPT_DEFAULT[0]
    if outcome is None:
        return registry.Poll(after=60, message="waiting for the world")
    if isinstance(outcome, errors.StepError):
        raise outcome
    return outcome
