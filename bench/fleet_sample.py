"""What the fleet benchmark watches while the fleet runs, and the beat process it runs beside.

Every `period` seconds: the engine's backlog (steps due but not started, runs due to start,
and how late the oldest is), the PostgreSQL connections of the benchmark database by state,
and the CPU seconds of each process tree (web, worker, beat, the client itself).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping

import psutil

from bench import env, procs


@contextlib.contextmanager
def beat(extra_env: Mapping[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """`celery -A hooksvc beat` on its own, as k8s/base/beat.yaml runs it."""
    log = env.DATA_DIR / "beat-fleet.log"
    schedule = env.DATA_DIR / "beat-fleet-schedule"
    schedule.unlink(missing_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "hooksvc", "beat", "-s", str(schedule)],
            cwd=env.ROOT,
            env={**os.environ, **env.process_env(), **extra_env},
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        procs.stop_group(process)


@dataclasses.dataclass
class Samples:
    times: list[float] = dataclasses.field(default_factory=list)
    #: Steps due (ready or waiting, due_at passed) and runs due to start (pending, wake_at passed).
    due_steps: list[int] = dataclasses.field(default_factory=list)
    due_runs: list[int] = dataclasses.field(default_factory=list)
    #: Seconds since the oldest due step or run became due.
    oldest_late: list[float] = dataclasses.field(default_factory=list)
    connections: list[dict[str, int]] = dataclasses.field(default_factory=list)
    #: Cores used by each process tree between consecutive samples.
    cores: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    #: VACUUM or ANALYZE runs in autovacuum's stead (autovacuum_standin), by table.
    vacuums: dict[str, int] = dataclasses.field(default_factory=dict)

    def mean_cores(self, tree: str) -> float:
        values = self.cores.get(tree) or [0.0]
        return sum(values) / len(values)

    def max_connections(self, state: str | None = None) -> int:
        if state is None:
            return max((sum(c.values()) for c in self.connections), default=0)
        return max((c.get(state, 0) for c in self.connections), default=0)


def backlog() -> tuple[int, int, float]:
    """Due steps, due runs, and how late (s) the oldest of them is."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), extract(epoch FROM now() - min(due_at)) FROM workflows_steprun"
            " WHERE state IN ('ready', 'waiting') AND due_at <= now()"
        )
        steps, step_late = cursor.fetchone()
        cursor.execute(
            "SELECT count(*), extract(epoch FROM now() - min(wake_at)) FROM workflows_run"
            " WHERE state = 'pending' AND wake_at <= now()"
        )
        runs, run_late = cursor.fetchone()
    return int(steps), int(runs), float(max(step_late or 0, run_late or 0))


def connections() -> dict[str, int]:
    """The benchmark database's PostgreSQL connections by state, this sampler's excluded."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(state, 'none'), count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1"
        )
        return {state: int(n) for state, n in cursor.fetchall()}


def backends() -> list[psutil.Process]:
    """The PostgreSQL backends serving the benchmark database (this sampler's included: it
    is small beside them): their CPU is the database's work for the fleet."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        pids = [int(pid) for (pid,) in cursor.fetchall()]
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            out.append(psutil.Process(pid))
    return out


#: autovacuum's defaults (PostgreSQL's postgresql.conf.sample and the "Automatic Vacuuming"
#: chapter): a table is vacuumed once its dead rows pass 50 + 20% of its live ones, analyzed
#: once its changes since the last analyze pass 50 + 10%, looked at every minute.
AUTOVACUUM_NAPTIME, VACUUM_BASE, VACUUM_SCALE, ANALYZE_SCALE = 60.0, 50, 0.2, 0.1


def autovacuum_standin(samples: Samples, stop: threading.Event) -> None:
    """What autovacuum would do, when the server has it off (this machine's CI PostgreSQL
    does: conf.d/90-ci.conf). Without it the engine's tables carry every dead row version
    of the fleet's updates (216,000 on workflows_run two thirds into a 10,000-cluster run)
    and scans slow as the run goes on, which no production server would show. Run from
    this database's connection, its CPU counts as PostgreSQL's."""
    from django.db import connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW autovacuum")
            if cursor.fetchone()[0] == "on":
                return
        while not stop.wait(AUTOVACUUM_NAPTIME):
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT relname, n_dead_tup > %s + %s * n_live_tup,"
                    " n_mod_since_analyze > %s + %s * n_live_tup"
                    " FROM pg_stat_user_tables WHERE relname LIKE 'workflows_%%'",
                    [VACUUM_BASE, VACUUM_SCALE, VACUUM_BASE, ANALYZE_SCALE],
                )
                for table, vacuum, analyze in cursor.fetchall():
                    if vacuum or analyze:
                        what = "VACUUM (ANALYZE)" if vacuum else "ANALYZE"
                        cursor.execute(f"{what} {connection.ops.quote_name(table)}")
                        samples.vacuums[table] = samples.vacuums.get(table, 0) + 1
    finally:
        connection.close()  # this thread's own connection


@contextlib.contextmanager
def sampling(
    trees: Mapping[str, Callable[[], list[psutil.Process]]], period: float = 2.0
) -> Iterator[Samples]:
    samples = Samples(cores={name: [] for name in trees})
    stop = threading.Event()

    def cpu() -> dict[str, float]:
        out = {}
        for name, tree in trees.items():
            try:
                out[name] = procs.cpu_seconds(tree())
            except psutil.NoSuchProcess:
                out[name] = 0.0
        return out

    def loop() -> None:
        from django.db import connection

        last, last_t = cpu(), time.monotonic()
        while not stop.wait(period):
            steps, runs, late = backlog()
            samples.times.append(time.time())
            samples.due_steps.append(steps)
            samples.due_runs.append(runs)
            samples.oldest_late.append(late)
            samples.connections.append(connections())
            now, now_t = cpu(), time.monotonic()
            for name in trees:
                samples.cores[name].append(max(0.0, now[name] - last[name]) / (now_t - last_t))
            last, last_t = now, now_t
        connection.close()

    threads = [
        threading.Thread(target=loop, daemon=True),
        threading.Thread(target=autovacuum_standin, args=(samples, stop), daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        yield samples
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def wait_settled(timeout: float) -> bool:
    """Wait until no run is active (background runs of non-blocking hooks finish too)."""
    from workflows.models import Run

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Run.objects.filter(state__in=Run.ACTIVE).exists():
            return True
        time.sleep(0.5)
    return False
