"""docs/benchmarks.md: the figures, their baselines, ratios and targets, as Markdown."""

from __future__ import annotations

import datetime
import os
import platform
from typing import Any

from bench import env, fleet_report


def _pct(value: float) -> str:
    return f"{100 * value:.0f}%"


def _verdict(ok: bool, miss: str = "") -> str:
    return "met" if ok else f"**missed** ({miss})"


def _label(quick: bool) -> str:
    if quick:
        return "quick"
    return "full (BENCH_FULL=1)" if os.environ.get("BENCH_FULL") == "1" else "default"


def render(results: dict[str, Any], *, sizes: env.Sizes, quick: bool, minutes: float) -> str:
    cores = os.cpu_count()
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m bench.run`); rerun it to refresh this page.",
        f"Machine: **{cores} cores**, {platform.machine()}, Python {platform.python_version()}; "
        f"{_label(quick)} sizes; {datetime.date.today().isoformat()}; "
        f"{minutes:.0f} minutes in all. Absolute figures move between runs on a machine that "
        "may be shared; the ratios to the baselines measured in the same run are what to compare.",
        "What the profiles showed and what changed: [performance.md](performance.md).",
        *(
            [
                "The fleet at 10,000 clusters (`make bench-fleet-10000`): "
                "[fleet-10000.md](fleet-10000.md)."
            ]
            if (env.ROOT / "docs" / "fleet-10000.md").exists()
            else []
        ),
        "",
        "| # | measure | figure | baseline (same run) | ratio | target | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    details: list[str] = []
    hooks = results.get("hooks")
    if hooks is not None:
        hp, bp = hooks.hook.peak, hooks.healthz.peak
        ratio = hp.rps / bp.rps
        near = hooks.hook.near(0.8)
        sp = hooks.hook_small.peak
        small_near = hooks.hook_small.near(0.8)
        drift = hp.rps / sp.rps - 1
        sync_ratio = hooks.sync_hook.peak.rps / hp.rps
        asgi_ratio = hooks.asgi_hook.peak.rps / hp.rps
        lines += [
            f"| 1 | hook peak throughput ({hooks.runs:,} runs) "
            f"| {hp.rps:.0f} req/s (c={hp.connections}) "
            f"| /healthz {bp.rps:.0f} req/s (c={bp.connections}) | {_pct(ratio)} | ≥ 60% "
            f"| {_verdict(ratio >= 0.6, f'by {_pct(0.6 - ratio)} of baseline')} |",
            f"| 1 | hook p99 at ~80% of peak | {near.p99_ms:.0f} ms (c={near.connections}, "
            f"{_pct(near.rps / hp.rps)} of peak) | /healthz p99 at c={near.connections}: "
            f"{_at(hooks.healthz, near.connections)} ms | | < 50 ms "
            f"| {_verdict(near.p99_ms < 50, f'{near.p99_ms - 50:.0f} ms over')} |",
            f"| 1 | hook peak, {hooks.runs:,} vs {hooks.clusters:,} runs | {hp.rps:.0f} req/s "
            f"| {sp.rps:.0f} req/s | {drift:+.0%} | within ±10% "
            f"| {_verdict(abs(drift) <= 0.10, f'{abs(drift) - 0.10:.0%} outside')} |",
            f"| 1 | hook p99 at ~80% of peak, {hooks.runs:,} vs {hooks.clusters:,} runs "
            f"| {near.p99_ms:.0f} ms | {small_near.p99_ms:.0f} ms (c={small_near.connections}) "
            f"| {near.p99_ms / small_near.p99_ms:.2f} | | |",
            f"| 1 | sync worker hook peak (closes keep-alive) "
            f"| {hooks.sync_hook.peak.rps:.0f} req/s "
            f"| gthread {hp.rps:.0f} req/s | {_pct(sync_ratio)} | | "
            f"{'gthread wins' if sync_ratio < 1 else 'sync wins'} |",
            f"| 1 | ASGI (uvicorn, 2 processes) hook peak "
            f"| {hooks.asgi_hook.peak.rps:.0f} req/s "
            f"| gthread {hp.rps:.0f} req/s | {_pct(asgi_ratio)} | | "
            f"{'gthread wins' if asgi_ratio < 1 else 'uvicorn wins'} |",
        ]
        details += _hooks_details(hooks)
    engine = results.get("engine")
    if engine is not None:
        ratio = engine.steps_per_second / engine.tasks_per_second
        # Issue 17's "must keep": at least 60% of plain Celery in the same run.
        target = 0.6
        lines.append(
            f"| 2 | engine: {engine.workflows:,} workflows x {engine.steps // engine.workflows} "
            f"noop steps, 2 worker processes | {engine.steps_per_second:.0f} steps/s "
            f"| plain Celery no-op {engine.tasks_per_second:.0f} tasks/s | {_pct(ratio)} "
            f"| ≥ {_pct(target)} "
            f"| {_verdict(ratio >= target, f'by {_pct(target - ratio)} of baseline')} |"
        )
        if engine.plain_cpu:
            # Issue 30's target: a run's CPU at most twice plain Celery's for as many tasks.
            cost = engine.cpu_per_run / engine.plain_cpu_per_run
            lines.append(
                f"| 2 | engine: CPU per run of {engine.steps // engine.workflows} steps "
                f"(worker and its PostgreSQL backends) | {1000 * engine.cpu_per_run:.0f} ms "
                f"| plain Celery, as many tasks: {1000 * engine.plain_cpu_per_run:.0f} ms "
                f"| {cost:.1f}x | ≤ 2x | {_verdict(cost <= 2, f'{cost:.1f}x')} |"
            )
    waiting = results.get("waiting")
    if waiting is not None:
        rss = waiting.rss_samples
        growth = rss[-1] - rss[0]
        lines += [
            f"| 3 | workers' CPU, {waiting.workflows:,} workflows polling every "
            f"{waiting.poll_seconds:g} s | {waiting.cpu_cores:.2f} cores "
            f"({waiting.polls_per_second:.0f} polls/s of "
            f"{waiting.needed_polls_per_second:.0f} due) "
            f"| | | < 0.25 core "
            f"| {_verdict(waiting.cpu_cores < 0.25, f'{waiting.cpu_cores / 0.25:.1f}x the target')}"
            " |",
            f"| 3 | workers' RSS over {waiting.window_seconds / 60:.0f} min | {rss[0]:.0f} → "
            f"{rss[-1]:.0f} MiB (max {max(rss):.0f}) | | {growth:+.0f} MiB | flat "
            f"| {_verdict(growth < 0.05 * rss[0], f'+{growth:.0f} MiB')} |",
        ]
        for count, (quiet, overdue) in waiting.reconcile_ms.items():
            lines.append(
                f"| 3 | reconciler pass, {count:,} waiting runs | {quiet:.1f} ms (none overdue) "
                f"| all overdue: {overdue:,.0f} ms | | grows slowly | |"
            )
    start = results.get("start")
    if start is not None:
        lines.append(
            f"| 4 | hook answer → first step started ({start.calls} calls, 5/s) "
            f"| median {start.median_ms:.0f} ms, p99 {start.p(start.from_answer_ms, 0.99):.0f} ms "
            f"| from the request: median {start.p(start.from_request_ms, 0.5):.0f} ms | | | |"
        )
    fleet = results.get("fleet")
    if fleet is not None:
        lines += fleet_report.summary_rows(fleet)
        details += fleet_report.section(fleet, sizes)
    answers = results.get("inplace")
    if answers is not None:
        from bench import inplace

        lines += inplace.rows(answers)
    web_rss = hooks.web_rss_mib if hooks is not None else (start.web_rss_mib if start else [])
    worker_rss = (engine.worker_rss_mib if engine is not None else []) or (
        start.worker_rss_mib if start else []
    )
    if web_rss or worker_rss:
        lines.append(
            f"| 5 | RSS after the runs | web worker {max(web_rss, default=0):.0f} MiB, "
            f"Celery worker {worker_rss[0] if worker_rss else 0:.0f} MiB (main) + "
            f"{max(worker_rss[1:], default=0):.0f} MiB (pool process) | | | | |"
        )
    return "\n".join([*lines, "", *details, *_notes(sizes)]) + "\n"


def _at(series: Any, connections: int) -> str:
    for r in series.results:
        if r.connections == connections:
            return f"{r.p99_ms:.0f}"
    return "n/a"


def _hooks_details(hooks: Any) -> list[str]:
    out = ["## 1. Hook answers: every level", ""]
    out += [
        "| server | endpoint | connections | req/s | p50 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for server, endpoint, series in (
        ("gthread", "/healthz", hooks.healthz),
        ("gthread", f"hook, {hooks.runs:,} runs", hooks.hook),
        ("gthread", f"hook, {hooks.clusters:,} runs", hooks.hook_small),
        ("sync", "/healthz", hooks.sync_healthz),
        ("sync", f"hook, {hooks.clusters:,} runs", hooks.sync_hook),
        ("uvicorn (ASGI)", "/healthz", hooks.asgi_healthz),
        ("uvicorn (ASGI)", f"hook, {hooks.clusters:,} runs", hooks.asgi_hook),
    ):
        for r in series.results:
            out.append(
                f"| {server} | {endpoint} | {r.connections} | {r.rps:.0f} | {r.p50_ms:.1f} "
                f"| {r.p99_ms:.1f} | {r.errors + r.non_2xx} |"
            )
    out += [
        "",
        "Queries of one call (CaptureQueriesContext; Django's per-request connection "
        "health check, a `SELECT 1` on the raw connection, comes on top):",
        "",
    ]
    for label, queries in hooks.queries.items():
        out.append(
            f"- {label} call, {len(queries)} {'query' if len(queries) == 1 else 'queries'}: "
            + "; ".join(f"`{q[:60]}…`" for q in queries)
        )
    if hooks.profile:
        out += [
            "",
            "py-spy (200 Hz) on one gunicorn worker under 16 connections, share of "
            "samples in each function (inclusive), hooksvc, Django and psycopg frames:",
            "",
        ]
        shown = 0
        for name, share in hooks.profile:
            # Skip the thread pool's own frames, which every sample shares.
            if not name.startswith(("Thread", "_worker ", "_WorkItem")) and shown < 25:
                out.append(f"- {share:.0f}% {name}")
                shown += 1
    else:
        out += ["", "py-spy could not attach (no ptrace permission?): no profile this run."]
    return [*out, ""]


def _notes(sizes: env.Sizes) -> list[str]:
    return [
        "## How it is measured",
        "",
        f"- 1: {sizes.clusters:,} clusters, {sizes.runs:,} runs seeded with COPY; gunicorn with "
        "hooksvc's gunicorn_conf (2 processes x 8 threads, TLS from hooksvc.serving.devcerts); wrk "
        "(keep-alive, Lua script cycling over the clusters) at "
        f"{', '.join(map(str, sizes.connections))} "
        f"connections, {sizes.wrk_seconds:g} s each. wrk runs on the same cores. The baseline is "
        "`/healthz` in the same server process (a GET through the same middleware and TLS). "
        'wrk is closed-loop (no `-R`), so "80% of peak" is the connection count whose '
        "throughput is nearest 80% of the peak; its share is in the table. The smaller table "
        "holds only the polled runs (an empty one would make every call a first call). The "
        "sync comparison uses `--worker-class sync` on the same configuration; the ASGI one "
        "runs uvicorn (`--workers 2`, the same TLS files) on Django's ASGI handler "
        "(bench/asgi.py), where hooksvc's synchronous views run in one thread per process. "
        "gevent is not installed: no green-thread server was measured.",
        f"- 2: {sizes.engine_workflows:,} workflows of {sizes.engine_steps} chained `noop` steps "
        f"vs {sizes.plain_tasks:,} `bench.noop` Celery tasks, one worker (`--concurrency 2`), "
        "Redis DB 12 (BENCH_FULL=1: 1,000 workflows, 10,000 tasks).",
        f"- 3: {sizes.waiting_workflows:,} runs seeded as the engine leaves them after a first "
        "poll "
        f"(step `bench_poll`, every {sizes.poll_seconds:g} s: no countdown message when the "
        "wait is batched, see HOOKSVC_POLL_BATCH_MIN_WAIT_SECONDS); CPU and RSS of the worker's "
        "process tree, beat included (`-B`, it sends the batches), over "
        f"{sizes.waiting_seconds:g} s (BENCH_FULL=1: 600 s). The reconciler is "
        "`workflows.engine.reconciler.reconcile()` timed in the runner (median of 5 passes; in the "
        "all-overdue pass every step is overdue: waiting steps are the batch poller's, so it "
        "sends none of them).",
        f"- 4: {sizes.start_calls} calls for new clusters, one every 200 ms over one keep-alive "
        "connection; the first step's `started_at` minus the time the client had the answer.",
        "- 5: psutil RSS of a gunicorn worker after benchmark 1 and of the Celery worker "
        "(main and pool processes) after benchmark 2.",
        *fleet_report.notes(sizes),
        "",
    ]
