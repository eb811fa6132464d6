"""Benchmark 6, third part: hold/work by workflow length, fixed against computed answers.

retryAfterSeconds is a whole number of seconds and a run's work starts at the hook's first
call, so a workflow of a whole number of seconds ends just after one of CAPI's calls: the
call that sees it done comes up to a second later. This measures that per workflow length,
each on its own blocking hook, all at once, with each answer mode.
"""

from __future__ import annotations

import dataclasses

from bench import db, env, fleet
from tests.support import capi_client

#: The hook each workflow length runs on (any blocking hook; one step per cluster).
HOOKS = (
    "BeforeClusterCreate",
    "BeforeClusterUpgrade",
    "AfterClusterUpgrade",
    "BeforeClusterDelete",
)


@dataclasses.dataclass
class Row:
    work_seconds: float
    #: mode -> (hold/work p50, p95, calls per step)
    figures: dict[str, tuple[float, float, float]]


def bench(sizes: env.Sizes) -> list[Row]:
    lengths = sizes.durations[: len(HOOKS)]
    steps = {s.hook: s for s in capi_client.lifecycle()}
    work = dict(zip(HOOKS, lengths, strict=False))
    rows = [Row(seconds, {}) for seconds in lengths]
    for mode in fleet.MODES:
        clusters = [
            capi_client.Cluster(f"d{g}-{i:04d}", "fleet", f"uid-d{g}-{i}", [steps[hook]])
            for g, hook in enumerate(work)
            for i in range(sizes.durations_clusters)
        ]
        done = fleet.run_pass(
            mode,
            clusters,
            work=work,
            retry_after=sizes.fleet_retry_after,
            arrivals=len(clusters) / 5,
        )
        for row, hook in zip(rows, work, strict=False):
            records = [c.records[0] for c in done.clusters if c.steps[0].hook == hook and c.done]
            ratios = [r.hold / row.work_seconds for r in records if r.hold is not None]
            calls = [r.calls for r in records]
            row.figures[mode] = (
                fleet.percentile(ratios, 0.5),
                fleet.percentile(ratios, 0.95),
                sum(calls) / len(calls) if calls else float("nan"),
            )
            p50, p95, per_step = row.figures[mode]
            print(
                f"    {row.work_seconds:g} s workflows, {mode}: hold/work p50 {p50:.2f} "
                f"p95 {p95:.2f}, {per_step:.1f} calls",
                flush=True,
            )
    db.reset()
    return rows
