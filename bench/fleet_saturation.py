"""Fixed against computed retryAfterSeconds on a saturated box, passes alternated in one run.

    python -m bench.fleet_saturation        (make bench-saturation)

Issue 30 asks that computed answers hold clusters no longer than fixed ones when the box is
saturated. Passes run one after another moved more with the machine's other load than with
the answers (docs/performance.md, 2026-11-28), so this runs fixed and computed alternately,
BENCH_SAT_PAIRS pairs of them (default 2), each a fresh stack driving the same fleet
(bench.fleet.drive_fleet: every hook's workflow one `wait`), and prints each pass and the
median of each mode's passes side by side. The fleet is sized to saturate a 2-core box in
a few minutes: BENCH_SAT_CLUSTERS clusters (default 400) starting BENCH_SAT_ARRIVALS per
second (default 40), BENCH_FLEET_WORK_SECONDS and BENCH_FLEET_RETRY_AFTER as the fleet's.
Opt-in: not part of `make bench` or `make test`. Four passes at the defaults took 47
minutes on this 2-core box while other work kept it loaded; fewer clusters shorten it.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from typing import Any

from bench import env

MODES = ("fixed", "computed")


@dataclasses.dataclass
class Row:
    """What one pass measured."""

    mode: str
    ratio_p50: float
    ratio_p95: float
    calls_per_step: float
    wall_p50: float
    #: The engine's oldest due work, sampled every 2 s: mean, p95 and max lateness (s).
    late_mean: float
    late_p95: float
    late_max: float
    due_max: int
    #: Mean cores of the web and the worker trees, and CPU ms per run of each.
    web_cores: float
    worker_cores: float
    web_ms: float
    worker_ms: float
    postgres_ms: float
    call_rate: float
    held_share: float
    healthy: bool
    seconds: float


def one_pass(mode: str, sizes: env.Sizes) -> Row:
    from bench import fleet

    report = fleet.drive_fleet(mode, sizes)
    s = report.samples
    late = s.oldest_late or [0.0]
    return Row(
        mode=mode,
        ratio_p50=report.ratio_p50,
        ratio_p95=report.ratio_p95,
        calls_per_step=report.calls_per_step,
        wall_p50=report.wall_p50,
        late_mean=statistics.fmean(late),
        late_p95=fleet.percentile(late, 0.95),
        late_max=max(late),
        due_max=max((a + b for a, b in zip(s.due_steps, s.due_runs, strict=True)), default=0),
        web_cores=s.mean_cores("web"),
        worker_cores=s.mean_cores("worker"),
        web_ms=report.cpu_per_run_ms("web"),
        worker_ms=report.cpu_per_run_ms("worker"),
        postgres_ms=report.cpu_per_run_ms("postgres"),
        call_rate=report.call_rate,
        held_share=report.held_share,
        healthy=report.all_succeeded
        and report.duplicate_moments == 0
        and report.early_releases == 0
        and report.errors == 0,
        seconds=report.seconds,
    )


HEADER = (
    "| pass | hold/work p50 / p95 | calls per step | wall p50 | engine late mean / p95 / max "
    "| due at most | cores web / worker | CPU ms per run web / worker / PostgreSQL "
    "| calls/s | held | checks | time |"
)


def line(label: str, r: Row) -> str:
    return (
        f"| {label} | {r.ratio_p50:.2f} / {r.ratio_p95:.2f} | {r.calls_per_step:.2f} "
        f"| {r.wall_p50:.0f} s | {r.late_mean:.1f} / {r.late_p95:.1f} / {r.late_max:.1f} s "
        f"| {r.due_max} | {r.web_cores:.2f} / {r.worker_cores:.2f} "
        f"| {r.web_ms:.1f} / {r.worker_ms:.1f} / {r.postgres_ms:.1f} | {r.call_rate:.0f} "
        f"| {r.held_share:.0%} | {'ok' if r.healthy else 'FAILED'} | {r.seconds:.0f} s |"
    )


def median_row(rows: list[Row]) -> Row:
    """Each figure's median over a mode's passes."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(Row):
        column = [getattr(r, field.name) for r in rows]
        if field.name == "mode":
            values[field.name] = column[0]
        elif field.name == "healthy":
            values[field.name] = all(column)
        else:
            values[field.name] = statistics.median(column)
    return Row(**values)


def bench(sizes: env.Sizes, pairs: int, modes: tuple[str, ...] = MODES) -> list[Row]:
    rows: list[Row] = []
    for i in range(pairs):
        # The order turns each pair, so that neither mode always runs first.
        for mode in modes if i % 2 == 0 else tuple(reversed(modes)):
            print(
                f"  pass {len(rows) + 1}: {mode}, {sizes.fleet_clusters} clusters at "
                f"{sizes.fleet_arrivals:g}/s",
                flush=True,
            )
            row = one_pass(mode, sizes)
            print("  " + line(mode, row), flush=True)
            rows.append(row)
    return rows


def table(rows: list[Row], modes: tuple[str, ...] = MODES) -> str:
    out = [HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    out += [line(f"{i + 1}. {r.mode}", r) for i, r in enumerate(rows)]
    for mode in modes:
        mine = [r for r in rows if r.mode == mode]
        if mine:
            out.append(line(f"**{mode}, median of {len(mine)}**", median_row(mine)))
    return "\n".join(out)


def main() -> None:
    env.setup_django()
    from bench import db

    base = env.sizes(quick=False)
    sizes = dataclasses.replace(
        base,
        fleet_clusters=int(os.environ.get("BENCH_SAT_CLUSTERS", "400")),
        fleet_arrivals=float(os.environ.get("BENCH_SAT_ARRIVALS", "40")),
    )
    pairs = int(os.environ.get("BENCH_SAT_PAIRS", "2"))
    modes = tuple(os.environ.get("BENCH_SAT_MODES", ",".join(MODES)).split(","))
    print(
        f"fixed against computed, saturated: {pairs} pair(s) of passes on {os.cpu_count()} "
        f"cores, one {sizes.fleet_work_seconds:g} s wait per hook, retryAfterSeconds "
        f"{sizes.fleet_retry_after}",
        flush=True,
    )
    db.create_database()
    db.flush_redis()
    began = time.monotonic()
    rows = bench(sizes, pairs, modes)
    db.reset()
    db.flush_redis()
    print(f"\n{table(rows, modes)}\n\n{(time.monotonic() - began) / 60:.1f} minutes", flush=True)


if __name__ == "__main__":
    main()
