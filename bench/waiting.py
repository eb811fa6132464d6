"""Benchmark 3: thousands of workflows waiting on a step that polls every 10 s.

The waiting state is seeded directly (COPY): `workflows` running runs, each with one
`bench_poll` step in `waiting`, due at times spread over one poll interval, as the engine
leaves them after a first poll (a countdown message per step only if the wait is too short
to batch). Then two worker processes, with beat sending the batches, keep them polling for
the window; their CPU and RSS are read with psutil.
The reconciler's pass is timed in this process against 1k, 5k and 20k waiting runs.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import statistics
import time
from collections.abc import Iterable
from typing import Any

from bench import db, env, procs

STEP_COLUMNS = db.STEP_COLUMNS


def spec(polls: int, every: float) -> dict[str, Any]:
    from tests.support import workflows

    return workflows.spec(
        db.HOOK, [{"name": "poll", "type": "bench_poll", "with": {"polls": polls, "every": every}}]
    )


def seed_waiting(count: int, *, polls: int, every: float, overdue: bool = False) -> None:
    """`count` running runs (ids 1..count after a reset), each waiting on its poll step."""
    from workflows.models import WorkflowTemplate

    the_spec = spec(polls, every)
    template = WorkflowTemplate.objects.create(name="bench-wait", hook=db.HOOK, spec=the_spec)
    now = datetime.datetime.now(datetime.UTC)

    def due(i: int) -> datetime.datetime:
        if overdue:
            return now - datetime.timedelta(seconds=3600)
        return now + datetime.timedelta(seconds=every * (i % 1000) / 1000)

    db.copy_rows(
        "workflows_run",
        db.RUN_COLUMNS,
        (
            db.run_row(
                template_id=template.pk,
                spec=the_spec,
                i=i,
                moment=db.MOMENT,
                state="running",
                now=now,
                # A waiting run is due only for its deadline (none here): its step is due.
                wake_at=None,
                template_name="bench-wait",
            )
            for i in range(count)
        ),
    )

    def steps() -> Iterable[tuple[Any, ...]]:
        params = json.dumps({"polls": polls, "every": every})
        for i in range(count):
            yield (
                i + 1,
                "poll",
                0,
                "bench_poll",
                params,
                "[]",
                None,
                3,
                "waiting",
                0,
                now,
                None,
                due(i),
                json.dumps({"polls": 1}),
                "{}",
                "polling",
                *db.UNCLAIMED,
            )

    db.copy_rows("workflows_steprun", STEP_COLUMNS, steps())
    db.cursor_analyze()


def polls_done() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(sum((memo->>'polls')::int), 0) FROM workflows_steprun")
        return int(cursor.fetchone()[0])


def time_reconcile(passes: int = 5) -> float:
    from workflows.engine import reconciler

    times = []
    for _ in range(passes):
        started = time.perf_counter()
        reconciler.reconcile()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


@dataclasses.dataclass
class Report:
    workflows: int
    window_seconds: float
    poll_seconds: float
    cpu_cores: float
    polls_per_second: float
    rss_samples: list[float]
    reconcile_ms: dict[int, tuple[float, float]]

    @property
    def needed_polls_per_second(self) -> float:
        return self.workflows / self.poll_seconds


def bench(sizes: env.Sizes) -> Report:
    from workflows.engine import dispatch, lifecycle
    from workflows.models import StepRun

    db.reset()
    db.flush_redis()
    every = sizes.poll_seconds
    polls = int(sizes.waiting_seconds / every) + 1000
    seed_waiting(sizes.waiting_workflows, polls=polls, every=every)
    now = datetime.datetime.now(datetime.UTC)
    # A countdown message per step only where the engine sends one (a wait too short to batch).
    if lifecycle.needs_countdown(StepRun.State.WAITING, every):
        for step_id, due_at in StepRun.objects.values_list("pk", "due_at"):
            after = max(0.0, (due_at - now).total_seconds())
            dispatch.poll_step(step_id, after)
    with procs.worker(name="worker-waiting", beat=True) as worker:
        # One poll interval to settle (the messages were sent before the worker started).
        time.sleep(every + 2)
        tree = worker.tree()
        cpu0, polls0, t0 = procs.cpu_seconds(tree), polls_done(), time.monotonic()
        samples = []
        while time.monotonic() - t0 < sizes.waiting_seconds:
            samples.append(sum(procs.rss_mib(p) for p in tree))
            time.sleep(min(10.0, sizes.waiting_seconds / 6))
        samples.append(sum(procs.rss_mib(p) for p in tree))
        elapsed = time.monotonic() - t0
        cpu = (procs.cpu_seconds(tree) - cpu0) / elapsed
        rate = (polls_done() - polls0) / elapsed
    print(
        f"  {sizes.waiting_workflows} waiting: workers {cpu:.2f} cores, {rate:.0f} polls/s "
        f"(due: {sizes.waiting_workflows / every:.0f}/s), RSS {samples[0]:.0f} -> "
        f"{samples[-1]:.0f} MiB",
        flush=True,
    )
    reconcile: dict[int, tuple[float, float]] = {}
    for count in sizes.reconcile_sizes:
        db.reset()
        seed_waiting(count, polls=polls, every=every)
        quiet = time_reconcile()
        db.reset()
        seed_waiting(count, polls=polls, every=every, overdue=True)
        overdue = time_reconcile(passes=1)
        db.flush_redis()
        reconcile[count] = (quiet, overdue)
        print(
            f"  reconcile at {count} waiting runs: {quiet:.1f} ms (none overdue), "
            f"{overdue:.0f} ms (all overdue)",
            flush=True,
        )
    db.reset()
    return Report(
        workflows=sizes.waiting_workflows,
        window_seconds=elapsed,
        poll_seconds=every,
        cpu_cores=cpu,
        polls_per_second=rate,
        rss_samples=samples,
        reconcile_ms=reconcile,
    )
