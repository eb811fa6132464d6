"""docs/benchmarks.md, benchmark 6: the summary rows and the "fleet lifecycle" section."""

from __future__ import annotations

import math
import os
from typing import Any

from bench import env

#: Targets of issue 16.
RATIO_P50, RATIO_P95, CALLS = 1.1, 1.3, 4.0
#: How late the oldest due step or run may get before the backlog counts as growing: a
#: batched poll waits up to a beat period (1 s) and a reconciler grace (30 s) is far off.
LATE_LIMIT_SECONDS = 5.0


def _verdict(ok: bool, miss: str) -> str:
    return "met" if ok else f"**missed** ({miss})"


def _f(value: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"


def summary_rows(report: Any) -> list[str]:
    by = {m.mode: m for m in report.modes}
    computed, fixed = by.get("computed"), by.get("fixed")
    rows = []
    if computed is not None:
        base = fixed or computed
        rows += [
            f"| 6 | fleet: hold/work p50 / p95, {computed.clusters:,} clusters, "
            f"{computed.work_seconds:g} s workflows (computed retryAfterSeconds) "
            f"| {_f(computed.ratio_p50)} / {_f(computed.ratio_p95)} "
            f"| fixed: {_f(base.ratio_p50)} / {_f(base.ratio_p95)} | "
            f"| ≤ {RATIO_P50} / ≤ {RATIO_P95} | {_ratio_verdict(computed)} |",
            "| 6 | fleet: hook calls per blocking step (computed) "
            f"| {_f(computed.calls_per_step, 1)} "
            f"| fixed: {_f(base.calls_per_step, 1)} | | ≤ {CALLS:g} "
            f"| {_verdict(computed.calls_per_step <= CALLS, f'{computed.calls_per_step:.1f}')} |",
            f"| 6 | fleet: lifecycle wall time p50 (computed) | {computed.wall_p50:.0f} s "
            f"| fixed: {base.wall_p50:.0f} s; ideal {computed.ideal:.0f} s | "
            f"{computed.wall_p50 / computed.ideal:.2f} of ideal | | |",
            f"| 6 | fleet: every run succeeded, one run per moment, no early release, "
            f"backlog not growing (computed) | {_health(computed)} | fixed: {_health(base)} "
            f"| | all | {_verdict(_healthy(computed), _health(computed))} |",
        ]
        if computed.clusters >= 10_000:
            rows.append(
                f"| 6 | fleet at {computed.clusters:,}: hook p99 | "
                f"{computed.latency_p99_ms:.0f} ms at {computed.call_rate:.0f} calls/s "
                f"| fixed: {base.latency_p99_ms:.0f} ms | | < 100 ms "
                f"| {_verdict(computed.latency_p99_ms < 100, f'{computed.latency_p99_ms:.0f} ms')}"
                " |"
            )
    capacity = report.capacity
    if capacity is not None and capacity.levels:
        rows.append(
            f"| 6 | Clusters blocked at once with hook p99 < 50 ms (retryAfterSeconds "
            f"{capacity.retry_after}) | {capacity.holds:,} | | | | |"
        )
    return rows


def _ratio_verdict(m: Any) -> str:
    ok = m.ratio_p50 <= RATIO_P50 and m.ratio_p95 <= RATIO_P95
    return _verdict(ok, f"p50 {m.ratio_p50:.2f}, p95 {m.ratio_p95:.2f}")


def _healthy(m: Any) -> bool:
    return (
        m.all_succeeded
        and m.duplicate_moments == 0
        and m.early_releases == 0
        and max(m.samples.oldest_late, default=0) < LATE_LIMIT_SECONDS
    )


def _health(m: Any) -> str:
    others = {k: v for k, v in m.runs.items() if k != "succeeded"}
    parts = [f"{m.runs.get('succeeded', 0):,} runs succeeded"]
    if others:
        parts.append(f"others {others}")
    if m.finished != m.clusters:
        parts.append(f"{m.clusters - m.finished} lifecycles unfinished")
    parts += [
        f"{m.duplicate_moments} duplicate moments",
        f"{m.early_releases} early releases",
        f"oldest due item {max(m.samples.oldest_late, default=0):.1f} s late at most",
    ]
    return ", ".join(parts)


def section(report: Any, sizes: env.Sizes) -> list[str]:
    modes = report.modes
    out = ["## 6. Fleet lifecycle", ""]
    if modes:
        first = modes[0]
        out += [
            f"{first.clusters:,} clusters, {sizes.fleet_arrivals:g} starting per second, each "
            "through create, a chained upgrade (three control-plane steps, two worker steps) "
            f"and delete: 14 blocking hook steps, each holding on a workflow of one "
            f"`wait` of {first.work_seconds:g} s (the ideal lifecycle: "
            f"{first.ideal:.0f} s; CAPI's own floor, one reconcile a second after each "
            f"rollout: {first.floor:.0f} s), templates at `retryAfterSeconds: "
            f"{sizes.fleet_retry_after}`. The same fleet ran once per answer mode "
            "(HOOKSVC_RETRY_AFTER).",
            "",
            "| measure | " + " | ".join(f"{m.mode} retryAfterSeconds" for m in modes) + " |",
            "|---|" + "---|" * len(modes),
        ]
        rows: list[tuple[str, Any]] = [
            ("lifecycle wall time p50 / p95", lambda m: f"{m.wall_p50:.0f} / {m.wall_p95:.0f} s"),
            ("wall time p50 / ideal", lambda m: f"{m.wall_p50 / m.ideal:.2f}"),
            (
                "hold/work p50 / p95, all blocking steps",
                lambda m: f"{_f(m.ratio_p50)} / {_f(m.ratio_p95)}",
            ),
            ("hook calls per blocking step", lambda m: _f(m.calls_per_step, 2)),
            (
                "hook p50 / p99 (client, held time left out), mean call rate",
                lambda m: (
                    f"{m.latency_p50_ms:.1f} / {m.latency_p99_ms:.1f} ms at "
                    f"{m.call_rate:.0f} calls/s"
                ),
            ),
            (
                "busiest 10 s: call rate, p99",
                lambda m: f"{m.peak_rate:.0f} calls/s, {m.peak_p99_ms:.1f} ms",
            ),
            (
                "engine backlog: most due steps / runs due to start; oldest late",
                lambda m: (
                    f"{max(m.samples.due_steps, default=0)} / "
                    f"{max(m.samples.due_runs, default=0)}; "
                    f"{max(m.samples.oldest_late, default=0):.1f} s"
                ),
            ),
            (
                "calls held until their run changed (linger): share, mean hold",
                lambda m: f"{m.held_share * 100:.0f}%, {m.held_mean_ms:.0f} ms",
            ),
            (
                "CPU (mean cores): web / worker / beat / PostgreSQL / client",
                lambda m: " / ".join(
                    f"{m.samples.mean_cores(t):.2f}"
                    for t in ("web", "worker", "beat", "postgres", "client")
                ),
            ),
            (
                "CPU per run (ms): web / worker / PostgreSQL",
                lambda m: " / ".join(
                    f"{m.cpu_per_run_ms(t):.1f}" for t in ("web", "worker", "postgres")
                ),
            ),
            (
                "PostgreSQL connections, most: all / active / idle in transaction",
                lambda m: (
                    f"{m.samples.max_connections()} / "
                    f"{m.samples.max_connections('active')} / "
                    f"{m.samples.max_connections('idle in transaction')}"
                ),
            ),
            ("runs and checks", _health),
            ("hook calls with an error (5xx, transport, Failure)", lambda m: f"{m.errors}"),
            (
                "VACUUM / ANALYZE in autovacuum's stead (the server has it off)",
                lambda m: (
                    ", ".join(
                        f"{table.removeprefix('workflows_')} {n}"
                        for table, n in sorted(m.samples.vacuums.items())
                    )
                    or "none (autovacuum on, or nothing to do)"
                ),
            ),
            ("benchmark time", lambda m: f"{m.seconds:.0f} s"),
        ]
        for label, cell in rows:
            out.append(f"| {label} | " + " | ".join(cell(m) for m in modes) + " |")
        out += ["", "Per hook step (hold p50 in seconds; hold/work p50 / p95; calls):", ""]
        out += [
            "| hook step | " + " | ".join(m.mode for m in modes) + " |",
            "|---|" + "---|" * len(modes),
        ]
        for i, step in enumerate(modes[0].steps):
            cells = [
                f"{m.steps[i].hold_p50:.1f} s; {_f(m.steps[i].ratio_p50)} / "
                f"{_f(m.steps[i].ratio_p95)}; {_f(m.steps[i].calls, 1)}"
                for m in modes
            ]
            out.append(f"| {step.label} | " + " | ".join(cells) + " |")
        out += ["", "Engine backlog over time (due steps + runs due to start, every ~10%):", ""]
        for m in modes:
            total = [s + r for s, r in zip(m.samples.due_steps, m.samples.due_runs, strict=True)]
            every = max(1, len(total) // 10)
            out.append(f"- {m.mode}: {', '.join(str(v) for v in total[::every]) or 'no samples'}")
        out.append("")
    if report.durations:
        modes_seen = list(report.durations[0].figures)
        out += [
            "Hold/work by workflow length (one blocking hook step each, "
            f"{sizes.durations_clusters} clusters per length, all at once; p50 / p95; calls):",
            "",
            "| workflow | " + " | ".join(modes_seen) + " |",
            "|---|" + "---|" * len(modes_seen),
        ]
        for row in report.durations:
            cells = [
                f"{_f(p50)} / {_f(p95)}; {_f(calls, 1)}"
                for p50, p95, calls in (row.figures[m] for m in modes_seen)
            ]
            out.append(f"| `wait` {row.work_seconds:g} s | " + " | ".join(cells) + " |")
        out.append("")
    capacity = report.capacity
    if capacity is not None and capacity.levels:
        out += [
            "Clusters blocked at once (BeforeClusterUpgrade waiting on an approval; the "
            f"client calls each one every {capacity.retry_after} s, as its cached answer runs "
            "out):",
            "",
            "| blocked clusters | calls/s | p50 ms | p99 ms | web cores | worker cores "
            "| client cores | errors |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for lv in capacity.levels:
            out.append(
                f"| {lv.clusters:,} | {lv.rate:.0f} | {lv.p50_ms:.1f} | {lv.p99_ms:.1f} "
                f"| {lv.web_cores:.2f} | {lv.worker_cores:.2f} | {lv.client_cores:.2f} "
                f"| {lv.errors} |"
            )
        out += [
            "",
            f"One {os.cpu_count()}-core box holds **{capacity.holds:,}** clusters blocked at "
            "once with hook p99 under 50 ms (the client runs on the same cores).",
            "",
        ]
    return out


def notes(sizes: env.Sizes) -> list[str]:
    return [
        f"- 6: tests/support/capi_client.py plays CAPI's topology controller (hook cache per "
        "hook and Cluster, one reconcile per Cluster per second, 50 reconciles at once, the "
        "rate limiter's backoff on errors; read in kubernetes-sigs/cluster-api, cited there) "
        "over keep-alive HTTPS from this process. hold = from a hook step's first call to the "
        "answer that let go; work = the workflow's own duration; calls = calls per hook step. "
        f"{sizes.fleet_clusters:,} clusters (BENCH_FLEET_CLUSTERS; BENCH_FULL=1: 10,000) start "
        f"{sizes.fleet_arrivals:g} per second (BENCH_FLEET_ARRIVALS). gunicorn (2 x 8 "
        "threads), one Celery worker of 4 processes, beat on its own, the benchmarks' "
        "PostgreSQL database and Redis DB. The backlog, PostgreSQL connections "
        "(pg_stat_activity of the benchmark database) and each process tree's CPU are "
        "sampled every 2 s. Capacity levels: "
        f"{', '.join(f'{n:,}' for n in sizes.capacity_levels)} clusters "
        f"(BENCH_CAPACITY_LEVELS), {sizes.capacity_seconds:g} s timed per level.",
    ]
