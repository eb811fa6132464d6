"""Benchmark 2: engine throughput (workflows of `noop` steps) beside plain Celery no-op tasks.

Both go through the same worker (prefork, two processes) and the same Redis DB. The engine
side creates the runs in one transaction, whose commit sends one `advance` per run; the
clock stops when every run has succeeded. The plain side sends `bench.noop` tasks as fast as
one producer can; the clock stops when the queue and the unacknowledged set are empty.

CPU is read the same way on both sides (psutil, user + system): the worker's process tree,
and the PostgreSQL backends of the benchmarks' database (the worker keeps its connections,
CELERY_DB_REUSE_MAX). Redis's CPU is not counted: its server is shared with whatever else
runs on the machine. The engine's figure is per run of `engine_steps` steps; the plain
side's is for the same number of tasks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

import psutil
import redis

from bench import db, env, procs


@dataclasses.dataclass
class Report:
    workflows: int
    steps: int
    engine_seconds: float
    tasks: int
    plain_seconds: float
    worker_rss_mib: list[float]
    #: CPU seconds of the worker and its database backends, each side.
    engine_cpu: float = 0.0
    plain_cpu: float = 0.0

    @property
    def cpu_per_run(self) -> float:
        return self.engine_cpu / self.workflows

    @property
    def plain_cpu_per_run(self) -> float:
        """Plain Celery's CPU for as many tasks as a run has steps."""
        return self.plain_cpu / self.tasks * (self.steps / self.workflows)

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.engine_seconds

    @property
    def tasks_per_second(self) -> float:
        return self.tasks / self.plain_seconds


def calls(count: int, *, offset: int = 0, to_version: str = "v1.34.0") -> list[Any]:
    """Parsed BeforeClusterUpgrade calls for `count` distinct clusters."""
    import json

    from hooksvc.contract import catalog, wire
    from tests.support import capi

    hook = catalog.HOOKS[db.HOOK]
    out = []
    for i in range(offset, offset + count):
        cluster = capi.cluster_v1beta2(name=db.cluster_name(i), uid=db.cluster_uid(i))
        body = capi.hook_request(db.HOOK, cluster, toKubernetesVersion=to_version)
        out.append(wire.parse_hook_call(hook, json.dumps(body).encode()))
    return out


def template(name: str, steps: list[dict[str, Any]]) -> Any:
    from tests.support import workflows

    return workflows.template(name, db.HOOK, steps)


def start_runs(tmpl: Any, hook_calls: list[Any]) -> None:
    """runs_ensure for every call in one transaction: its commit wakes the worker."""
    from django.db import transaction

    from workflows.hookpath import runs as hook_runs

    with transaction.atomic():
        for call in hook_calls:
            hook_runs.runs_ensure(templates=[tmpl], call=call)


def wait_finished(expected: int, *, timeout: float) -> float:
    from workflows.models import Run

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = Run.objects.filter(state__in=Run.FINISHED).count()
        if done >= expected:
            return time.monotonic()
        time.sleep(0.05)
    raise RuntimeError(f"only {done} of {expected} runs finished within {timeout} s")


def wait_drained(client: redis.Redis, *, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not client.llen("celery") and not client.hlen("unacked"):
            return time.monotonic()
        time.sleep(0.02)
    raise RuntimeError(f"the queue did not drain within {timeout} s")


def _cpu(worker: procs.Worker) -> dict[int, float]:
    """CPU seconds so far of each process of the worker and of the database's backends."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        pids = [row[0] for row in cursor.fetchall()]
    processes = worker.tree()
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            processes.append(psutil.Process(pid))
    return {p.pid: procs.cpu_seconds([p]) for p in processes}


def _spent(before: dict[int, float], after: dict[int, float]) -> float:
    """What processes spent between two readings (a process new since counts in full)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def bench(sizes: env.Sizes) -> Report:
    from bench import steps

    db.reset()
    db.flush_redis()
    chain = [
        {"name": f"s{n}", "type": "noop", "dependsOn": [f"s{n - 1}"] if n else []}
        for n in range(sizes.engine_steps)
    ]
    tmpl = template("bench-noop", chain)
    hook_calls = calls(sizes.engine_workflows)
    client = redis.Redis.from_url(env.REDIS_URL)
    with procs.worker(name="worker-engine") as worker:
        # Warm up both paths (imports, connections) before the clocks run.
        steps.noop.delay()
        wait_drained(client, timeout=60)
        cpu = _cpu(worker)
        started = time.monotonic()
        for _ in range(sizes.plain_tasks):
            steps.noop.delay()
        plain = wait_drained(client, timeout=600) - started
        plain_cpu = _spent(cpu, _cpu(worker))
        print(
            f"  plain Celery: {sizes.plain_tasks} tasks in {plain:.1f} s "
            f"({sizes.plain_tasks / plain:.0f}/s)",
            flush=True,
        )
        cpu = _cpu(worker)
        started = time.monotonic()
        start_runs(tmpl, hook_calls)
        engine_seconds = wait_finished(len(hook_calls), timeout=900) - started
        engine_cpu = _spent(cpu, _cpu(worker))
        total = len(hook_calls) * sizes.engine_steps
        print(
            f"  engine: {total} steps in {engine_seconds:.1f} s ({total / engine_seconds:.0f}/s);"
            f" CPU {engine_cpu:.1f} s, plain Celery's {plain_cpu:.1f} s",
            flush=True,
        )
        rss = [procs.rss_mib(p) for p in worker.tree()]
    return Report(
        workflows=len(hook_calls),
        steps=total,
        engine_seconds=engine_seconds,
        tasks=sizes.plain_tasks,
        plain_seconds=plain,
        worker_rss_mib=rss,
        engine_cpu=engine_cpu,
        plain_cpu=plain_cpu,
    )
