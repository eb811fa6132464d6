"""The benchmarks' own PostgreSQL database and Redis DB, sizes, and Django setup.

Everything here is separate from development and tests: the database `hooksvc_bench`
(BENCH_DATABASE_URL) and Redis DB 12 (BENCH_REDIS_URL), which the runner flushes, and no
other. Sizes default to the issue's; `--quick` shrinks them for a smoke run, BENCH_FULL=1
stretches the durations (ten minutes of waiting), and each size has its own variable.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "var" / "bench"
DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hooksvc_bench"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
STEP_MODULES = "bench.steps"


def process_env() -> dict[str, str]:
    """The environment of every process a benchmark starts (and of the runner itself)."""
    return {
        "DJANGO_SETTINGS_MODULE": "hooksvc.settings",
        "DATABASE_URL": DATABASE_URL,
        "CELERY_BROKER_URL": REDIS_URL,
        "HOOKSVC_DATA_DIR": str(DATA_DIR),
        "HOOKSVC_STEP_MODULES": STEP_MODULES,
        "HOOKSVC_ENV": "development",
        "HOOKSVC_LOG_FORMAT": "text",
    }


def setup_django() -> None:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    os.environ.update(process_env())
    import django

    django.setup()


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


@dataclasses.dataclass(frozen=True)
class Sizes:
    clusters: int
    runs: int
    wrk_seconds: float
    connections: tuple[int, ...]
    engine_workflows: int
    engine_steps: int
    plain_tasks: int
    waiting_workflows: int
    waiting_seconds: float
    poll_seconds: float
    reconcile_sizes: tuple[int, ...]
    start_calls: int
    #: 6: clusters through the lifecycle, how many start per second, each hook's workflow
    #: (one `wait`), the templates' retryAfterSeconds; blocked clusters per capacity level.
    fleet_clusters: int = 1000
    #: What one 2-core box runs without a backlog (hold/work 1.02 at 4 per second, 1.50 at
    #: 6: docs/performance.md); 10 per second saturated it, so its figures were the box's.
    fleet_arrivals: float = 4.0
    fleet_work_seconds: float = 4.0
    fleet_retry_after: int = 10
    capacity_levels: tuple[int, ...] = (1000, 2000, 4000, 8000)
    capacity_seconds: float = 30.0
    #: Workflow lengths compared one hook step each, and clusters per length.
    durations: tuple[float, ...] = (4.0, 6.5, 10.0, 30.0)
    durations_clusters: int = 50


def sizes(*, quick: bool) -> Sizes:
    full = os.environ.get("BENCH_FULL", "") == "1"
    if quick:
        defaults = Sizes(
            clusters=1000,
            runs=10_000,
            wrk_seconds=2,
            connections=(1, 4, 16, 64),
            engine_workflows=100,
            engine_steps=10,
            plain_tasks=1000,
            waiting_workflows=500,
            waiting_seconds=30,
            poll_seconds=10,
            reconcile_sizes=(1000, 5000),
            start_calls=50,
            fleet_clusters=100,
            capacity_levels=(500, 1000),
            capacity_seconds=10.0,
            durations=(4.0, 10.0),
            durations_clusters=20,
        )
    else:
        defaults = Sizes(
            clusters=10_000,
            runs=100_000,
            wrk_seconds=10 if full else 5,
            connections=(1, 2, 4, 8, 16, 32, 64),
            # The 1,000 workflows take ~10 minutes on a busy 2-core machine.
            engine_workflows=1000 if full else 200,
            engine_steps=10,
            plain_tasks=10_000 if full else 2000,
            waiting_workflows=5000,
            waiting_seconds=600 if full else 120,
            poll_seconds=10,
            reconcile_sizes=(1000, 5000, 20_000),
            start_calls=200,
            fleet_clusters=10_000 if full else 1000,
            capacity_levels=(1000, 2000, 4000, 8000, 12_000) if full else (1000, 2000, 4000, 8000),
            capacity_seconds=60.0 if full else 30.0,
        )
    conns = os.environ.get("BENCH_CONNECTIONS")
    recs = os.environ.get("BENCH_RECONCILE_SIZES")
    levels = os.environ.get("BENCH_CAPACITY_LEVELS")
    lengths = os.environ.get("BENCH_DURATIONS")
    return Sizes(
        clusters=_int("BENCH_CLUSTERS", defaults.clusters),
        runs=_int("BENCH_RUNS", defaults.runs),
        wrk_seconds=_float("BENCH_WRK_SECONDS", defaults.wrk_seconds),
        connections=tuple(int(c) for c in conns.split(",")) if conns else defaults.connections,
        engine_workflows=_int("BENCH_ENGINE_WORKFLOWS", defaults.engine_workflows),
        engine_steps=_int("BENCH_ENGINE_STEPS", defaults.engine_steps),
        plain_tasks=_int("BENCH_PLAIN_TASKS", defaults.plain_tasks),
        waiting_workflows=_int("BENCH_WAITING_WORKFLOWS", defaults.waiting_workflows),
        waiting_seconds=_float("BENCH_WAITING_SECONDS", defaults.waiting_seconds),
        poll_seconds=_float("BENCH_POLL_SECONDS", defaults.poll_seconds),
        reconcile_sizes=tuple(int(s) for s in recs.split(","))
        if recs
        else defaults.reconcile_sizes,
        start_calls=_int("BENCH_START_CALLS", defaults.start_calls),
        fleet_clusters=_int("BENCH_FLEET_CLUSTERS", defaults.fleet_clusters),
        fleet_arrivals=_float("BENCH_FLEET_ARRIVALS", defaults.fleet_arrivals),
        fleet_work_seconds=_float("BENCH_FLEET_WORK_SECONDS", defaults.fleet_work_seconds),
        fleet_retry_after=_int("BENCH_FLEET_RETRY_AFTER", defaults.fleet_retry_after),
        capacity_levels=tuple(int(n) for n in levels.split(","))
        if levels
        else defaults.capacity_levels,
        capacity_seconds=_float("BENCH_CAPACITY_SECONDS", defaults.capacity_seconds),
        durations=tuple(float(d) for d in lengths.split(",")) if lengths else defaults.durations,
        durations_clusters=_int("BENCH_DURATIONS_CLUSTERS", defaults.durations_clusters),
    )
