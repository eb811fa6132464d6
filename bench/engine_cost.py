"""What one run costs the engine, in process (no Celery): statements, transactions, messages,
and CPU (this process's and its PostgreSQL backend's, read with psutil).

    python -m bench.engine_cost [runs] [wait|chain|wait,chain]

`wait` is benchmark 6's run (one `wait` step, here 0.5 s: under
HOOKSVC_POLL_BATCH_MIN_WAIT_SECONDS, so polled by countdown as the fleet's 4 s are);
`chain` is benchmark 2's (10 chained `noop` steps). The hook's part (the run's insert) is
counted apart from the worker's. Messages are recorded instead of sent (dispatch.broker)
and run in this process when due. Uses the benchmarks' database (BENCH_DATABASE_URL),
which it empties; not part of `make bench`.
"""

from __future__ import annotations

import collections
import heapq
import sys
import time
from collections.abc import Callable
from typing import Any

import psutil

from bench import db, env

#: Labels for the engine's own statements (workflows.engine.sql), by a fragment of each.
LABELS = (
    ("running->succeeded", "SUCCEED_AND_FINISH_RUN"),
    ("pending->running", "START_RUN"),
    ("recorded AS", "SUCCEED_AND_CLAIM_NEXT"),
    ("r.message = ", "RECORD_FIRST_POLL"),
    ("FOR UPDATE OF r", "LOCK_RUN"),
    ("ORDER BY s.position", "RUN_STEPS"),
    ("SET state = 'ready'", "CLAIM_PROMOTED"),
    ("claims = s.claims + 1", "CLAIM_STEPS"),
)


class Counter:
    """Statements by label, and transactions: atomic blocks that ran one, and autocommits."""

    def __init__(self) -> None:
        self.statements: collections.Counter[str] = collections.Counter()
        #: Wall seconds by label (PostgreSQL's work and the round trip).
        self.seconds: collections.Counter[str] = collections.Counter()
        self.autocommit = 0
        self.commits = 0
        self._dirty = False

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        from django.db import connection

        label = next((name for part, name in LABELS if part in sql), "")
        if not label:
            words = [w.strip('"') for w in sql.split()[:3]]
            label = " ".join(words) if words[:1] not in (["SAVEPOINT"], ["RELEASE"]) else words[0]
        self.statements[label] += 1
        if connection.in_atomic_block:
            self._dirty = True
        else:
            self.autocommit += 1
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds[label] += time.perf_counter() - started

    def committed(self) -> None:
        if self._dirty:
            self.commits += 1
        self._dirty = False


def measure(label: str, steps: list[dict[str, Any]], runs: int) -> None:
    from django.db import connection, transaction

    from tests.support import capi
    from tests.support import workflows as wf
    from workflows.engine import dispatch, scheduling
    from workflows.hookpath import runs as hook_runs
    from workflows.kube import events
    from workflows.models import Run

    queue: list[tuple[float, int, str, tuple[Any, ...]]] = []
    sent: collections.Counter[str] = collections.Counter()

    def broker(name: str, args: tuple[Any, ...], countdown: float | None) -> None:
        short = name.removeprefix("workflows.")
        sent[short + (" (countdown)" if countdown else "")] += 1
        heapq.heappush(queue, (time.monotonic() + (countdown or 0), len(sent), short, args))

    def drain() -> None:
        tasks: dict[str, Callable[..., None]] = {
            "advance": scheduling.advance,
            "run_step": scheduling.run_step,
            "cluster_event": events.emit,
        }
        while queue:
            due, _, name, args = heapq.heappop(queue)
            time.sleep(max(0.0, due - time.monotonic()))
            tasks[name](*args)

    dispatch.broker = broker
    db.reset()
    template = wf.template(f"cost-{label}", steps=steps)
    calls = [
        wf.call(cluster=capi.cluster_v1beta2(name=f"c{i}", uid=f"uid-{i}")) for i in range(runs)
    ]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = psutil.Process(cursor.fetchone()[0])
    commit = connection.commit
    for phase in ("hook", "worker"):
        counter = Counter()
        sent.clear()

        def counted_commit(counter: Counter = counter) -> None:
            commit()
            counter.committed()

        cpu, pg = time.process_time(), _cpu(backend)
        connection.commit = counted_commit  # type: ignore[method-assign]
        try:
            with connection.execute_wrapper(counter):
                if phase == "hook":
                    for call in calls:
                        with transaction.atomic():
                            hook_runs.runs_ensure(templates=[template], call=call)
                else:
                    drain()
        finally:
            connection.commit = commit  # type: ignore[method-assign]
        cpu, pg = time.process_time() - cpu, _cpu(backend) - pg
        _report(f"{label}, {phase}", counter, sent, runs, cpu=cpu, pg=pg)
    states = collections.Counter(Run.objects.values_list("state", flat=True))
    if states != {"succeeded": runs}:
        raise RuntimeError(f"runs ended {dict(states)}")


def _report(
    what: str,
    counter: Counter,
    sent: collections.Counter[str],
    runs: int,
    *,
    cpu: float,
    pg: float,
) -> None:
    statements = sum(counter.statements.values())
    print(
        f"{what}: per run {statements / runs:.1f} statements in "
        f"{(counter.commits + counter.autocommit) / runs:.1f} transactions "
        f"({counter.autocommit / runs:.1f} of one statement); messages "
        + ", ".join(f"{k} {v / runs:.1f}" for k, v in sorted(sent.items()))
        + f"; CPU {1000 * cpu / runs:.2f} ms here, {1000 * pg / runs:.2f} ms PostgreSQL",
        flush=True,
    )
    for name, count in counter.statements.most_common():
        ms = 1000 * counter.seconds[name] / count
        print(f"    {count / runs:5.2f}  {ms:5.2f} ms each  {name}")


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def main() -> None:
    import logging

    env.setup_django()
    logging.disable(logging.WARNING)
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    which = sys.argv[2].split(",") if len(sys.argv) > 2 else ["wait", "chain"]
    db.create_database()
    if "wait" in which:
        measure("wait", [{"name": "work", "type": "wait", "with": {"seconds": 0.5}}], runs)
    if "chain" in which:
        chain = [
            {"name": f"s{n}", "type": "noop", "dependsOn": [f"s{n - 1}"] if n else []}
            for n in range(10)
        ]
        measure("chain", chain, runs)


if __name__ == "__main__":
    main()
