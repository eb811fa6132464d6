"""Benchmark 6: a fleet through create, a chained upgrade and delete, as CAPI drives it.

`clusters` Clusters start their lifecycle `arrivals` per second; each goes through the 15
hook steps of tests/support/capi_client.lifecycle (14 blocking) with the client honouring
CAPI's hook cache (50 reconciles at once, one reconcile per Cluster per second). Every hook
has a template whose workflow is one `wait` of `work_seconds`. The production stack runs:
gunicorn over TLS, a Celery worker (production's concurrency, 4), beat on its own, PostgreSQL
and Redis (the benchmarks' own database and Redis DB). The fleet runs once per answer mode
(MODES); a sampler records the engine's backlog, CPU and PostgreSQL connections meanwhile
(bench/fleet_sample.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import statistics
import time
from collections.abc import Mapping
from typing import Any

import psutil

from bench import db, env, fleet_sample, procs
from tests.support import capi_client

#: What the hook path answers while a run holds (HOOKSVC_RETRY_AFTER).
MODES = ("fixed", "computed")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def create_templates(work: Mapping[str, float], retry_after: int) -> None:
    """One template per hook in `work`: a `wait` of that many seconds."""
    from tests.support import workflows
    from workflows.models import WorkflowTemplate

    for hook, seconds in sorted(work.items()):
        WorkflowTemplate.objects.create(
            name=f"fleet-{hook.lower()}",
            hook=hook,
            spec=workflows.spec(
                hook,
                [{"name": "work", "type": "wait", "with": {"seconds": seconds}}],
                retryAfterSeconds=retry_after,
            ),
        )


@dataclasses.dataclass
class StepFigures:
    label: str
    hold_p50: float
    ratio_p50: float
    ratio_p95: float
    calls: float


@dataclasses.dataclass
class ModeReport:
    mode: str
    clusters: int
    finished: int
    seconds: float
    work_seconds: float
    steps: list[StepFigures]
    ratio_p50: float
    ratio_p95: float
    calls_per_step: float
    wall_p50: float
    wall_p95: float
    ideal: float
    floor: float
    latency_p50_ms: float
    latency_p99_ms: float
    call_rate: float
    peak_rate: float
    peak_p99_ms: float
    errors: int
    runs: dict[str, int]
    duplicate_moments: int
    early_releases: int
    samples: fleet_sample.Samples
    #: Calls hooksvc held for their run to change (Server-Timing linger): share, mean ms.
    held_share: float = 0.0
    held_mean_ms: float = 0.0

    def cpu_per_run_ms(self, tree: str) -> float:
        """CPU milliseconds of one process tree per run the fleet made."""
        runs = sum(self.runs.values())
        return self.samples.mean_cores(tree) * self.seconds * 1000 / runs if runs else 0.0

    @property
    def all_succeeded(self) -> bool:
        return set(self.runs) == {"succeeded"} and self.finished == self.clusters


def make_clusters(count: int) -> list[capi_client.Cluster]:
    steps = capi_client.lifecycle()
    return [
        capi_client.Cluster(db.cluster_name(i), "fleet", db.cluster_uid(i), steps)
        for i in range(count)
    ]


@dataclasses.dataclass
class Pass:
    """One fleet against one stack: the clusters as the client left them, and what was seen."""

    clusters: list[capi_client.Cluster]
    #: (sent, seconds) of every hook call, the time hooksvc held it left out.
    calls: list[tuple[float, float]]
    #: How long hooksvc held each call it held (ms).
    held: list[float]
    samples: fleet_sample.Samples
    seconds: float


def run_pass(
    mode: str,
    clusters: list[capi_client.Cluster],
    *,
    work: Mapping[str, float],
    retry_after: int,
    arrivals: float,
) -> Pass:
    """`clusters` through their steps against a fresh stack whose hook path answers in `mode`;
    `work` is each hook's workflow (a `wait` of that many seconds)."""
    db.reset()
    db.flush_redis()
    create_templates(work, retry_after)
    calls: list[tuple[float, float]] = []
    held: list[float] = []

    def observe(
        cluster: capi_client.Cluster,
        step: capi_client.HookStep,
        sent: float,
        took: float,
        reply: capi_client.Reply,
    ) -> None:
        # A held call's latency is its own work: the hold is the answer waiting for its run.
        calls.append((sent, max(0.0, took - reply.held_ms / 1000)))
        if reply.held_ms:
            held.append(reply.held_ms)

    extra = {"HOOKSVC_RETRY_AFTER": mode}
    with (
        procs.web(extra_env=extra) as web,
        procs.worker(concurrency=4, name=f"worker-fleet-{mode}", extra_env=extra) as worker,
        fleet_sample.beat(extra) as beat,
        capi_client.HTTPSTransport("127.0.0.1", web.port, procs.tls_dir() / "ca.crt") as transport,
    ):
        warm_up(transport)
        controller = capi_client.Controller(transport, clock=time.time, observe=observe)
        began = time.time()
        starts = [began + i / arrivals for i in range(len(clusters))]
        trees = {
            "web": lambda: [psutil.Process(web.process.pid), *web.workers()],
            "worker": worker.tree,
            "beat": lambda: [psutil.Process(beat.pid)],
            "client": lambda: [psutil.Process()],
            "postgres": fleet_sample.backends,
        }
        longest = sum(work.get(s.hook, 0) for s in clusters[0].steps)
        with fleet_sample.sampling(trees) as samples:
            timeout = len(clusters) / arrivals + 10 * longest + 600
            capi_client.drive(controller, clusters, starts=starts, timeout=timeout)
            fleet_sample.wait_settled(timeout=120)
        seconds = time.time() - began
    return Pass(clusters, calls, held, samples, seconds)


def drive_fleet(mode: str, sizes: env.Sizes) -> ModeReport:
    """The fleet through its whole lifecycle, every hook's workflow a `wait` of the same length."""
    clusters = make_clusters(sizes.fleet_clusters)
    work = {s.hook: sizes.fleet_work_seconds for s in clusters[0].steps}
    done = run_pass(
        mode,
        clusters,
        work=work,
        retry_after=sizes.fleet_retry_after,
        arrivals=sizes.fleet_arrivals,
    )
    report = summarize(
        mode,
        sizes=sizes,
        clusters=done.clusters,
        calls=done.calls,
        samples=done.samples,
        seconds=done.seconds,
    )
    report.held_share = len(done.held) / len(done.calls) if done.calls else 0.0
    report.held_mean_ms = statistics.fmean(done.held) if done.held else 0.0
    return report


#: Clusters that take the processes' first calls and tasks (imports, connections) before
#: the clock runs; the checks leave their runs out.
WARM_UP = "warm-up-"


def warm_up(transport: capi_client.Transport) -> None:
    steps = capi_client.lifecycle()[:1]
    clusters = [
        capi_client.Cluster(f"{WARM_UP}{i}", "fleet", f"warm-up-{i}", steps) for i in range(8)
    ]
    capi_client.drive(capi_client.Controller(transport), clusters, concurrency=8, timeout=120)
    fleet_sample.wait_settled(timeout=60)


def summarize(
    mode: str,
    *,
    sizes: env.Sizes,
    clusters: list[capi_client.Cluster],
    calls: list[tuple[float, float]],
    samples: fleet_sample.Samples,
    seconds: float,
) -> ModeReport:
    work = sizes.fleet_work_seconds
    steps = clusters[0].steps
    figures = []
    ratios_all: list[float] = []
    calls_all: list[int] = []
    for i, step in enumerate(steps):
        if not step.blocking:
            continue
        holds = [h for c in clusters if (h := c.records[i].hold) is not None]
        ratios = [h / work for h in holds]
        counts = [c.records[i].calls for c in clusters if c.records[i].released is not None]
        ratios_all += ratios
        calls_all += counts
        figures.append(
            StepFigures(
                label=step.label,
                hold_p50=percentile(holds, 0.5),
                ratio_p50=percentile(ratios, 0.5),
                ratio_p95=percentile(ratios, 0.95),
                calls=statistics.fmean(counts) if counts else float("nan"),
            )
        )
    walls = [
        c.records[-1].released - first
        for c in clusters
        if c.done
        and c.records[-1].released is not None
        and (first := c.records[0].first_call) is not None
    ]
    blocking = sum(s.blocking for s in steps)
    # CAPI's own floor: after each hook that a rollout follows (not chained), the next
    # reconcile comes at least a rate-limit period after the one that let go.
    transitions = sum(1 for s in steps[:-1] if not s.chained)
    latencies = [took * 1000 for _, took in calls]
    peak_rate, peak_p99 = _busiest(calls)
    return ModeReport(
        mode=mode,
        clusters=len(clusters),
        finished=sum(c.done for c in clusters),
        seconds=seconds,
        work_seconds=work,
        steps=figures,
        ratio_p50=percentile(ratios_all, 0.5),
        ratio_p95=percentile(ratios_all, 0.95),
        calls_per_step=statistics.fmean(calls_all) if calls_all else float("nan"),
        wall_p50=percentile(walls, 0.5),
        wall_p95=percentile(walls, 0.95),
        ideal=blocking * work,
        floor=blocking * work + transitions * capi_client.RATE_LIMIT_SECONDS,
        latency_p50_ms=percentile(latencies, 0.5),
        latency_p99_ms=percentile(latencies, 0.99),
        call_rate=len(calls) / seconds,
        peak_rate=peak_rate,
        peak_p99_ms=peak_p99,
        errors=sum(r.errors for c in clusters for r in c.records),
        runs=run_states(),
        duplicate_moments=duplicate_moments(),
        early_releases=early_releases(clusters),
        samples=samples,
    )


def _busiest(calls: list[tuple[float, float]], window: float = 10.0) -> tuple[float, float]:
    """The busiest `window`'s call rate and the p99 (ms) of that window's calls."""
    if not calls:
        return 0.0, float("nan")
    start = min(s for s, _ in calls)
    buckets: dict[int, list[float]] = {}
    for sent, took in calls:
        buckets.setdefault(int((sent - start) // window), []).append(took * 1000)
    busiest = max(buckets.values(), key=len)
    return len(busiest) / window, percentile(busiest, 0.99)


def run_states() -> dict[str, int]:
    from django.db.models import Count

    from workflows.models import Run

    runs = Run.objects.exclude(cluster_name__startswith=WARM_UP)
    return dict(runs.values_list("state").annotate(n=Count("id")).order_by())


def duplicate_moments() -> int:
    """(template, cluster, moment) keys with more than one run: the engine's promise is none."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM workflows_run"
            " GROUP BY template_name, cluster_key, moment HAVING count(*) > 1) d"
        )
        return int(cursor.fetchone()[0])


def early_releases(clusters: list[capi_client.Cluster]) -> int:
    """Hook steps let go (a 0) before their run had finished: must be none."""
    from workflows.models import Run

    finished: dict[tuple[str, str, str], datetime.datetime] = {}
    for key, hook, moment, at in Run.objects.values_list(
        "cluster_key", "hook", "moment", "finished_at"
    ):
        if at is not None:
            finished[(key, hook, moment)] = at
    early = 0
    for cluster in clusters:
        for step, record in zip(cluster.steps, cluster.records, strict=True):
            if not step.blocking or record.released is None:
                continue
            at = finished.get((cluster.uid, step.hook, moment_of(step)))
            if at is None or at.timestamp() > record.released:
                early += 1
    return early


def moment_of(step: capi_client.HookStep) -> str:
    """workflows.hookpath.selection.moment_key, from the client's side."""
    fields: dict[str, Any] = step.fields
    if step.hook == "BeforeClusterUpgrade":
        return str(fields["toKubernetesVersion"])
    if "toKubernetesVersion" in fields:
        return f"{fields['fromKubernetesVersion']}->{fields['toKubernetesVersion']}"
    return str(fields.get("kubernetesVersion", ""))


@dataclasses.dataclass
class Report:
    modes: list[ModeReport]
    durations: list[Any]
    capacity: Any


#: Which parts of the benchmark run (BENCH_FLEET_PARTS, comma-separated): the lifecycle
#: in both modes (BENCH_FLEET_MODES), hold/work by workflow length, the capacity levels.
PARTS = ("lifecycle", "durations", "capacity")


def bench(sizes: env.Sizes) -> Report:
    from bench import fleet_capacity, fleet_durations

    parts = os.environ.get("BENCH_FLEET_PARTS", ",".join(PARTS)).split(",")
    # BENCH_FLEET_MODES: the lifecycle in these answer modes only (a rerun of one of them).
    modes = os.environ.get("BENCH_FLEET_MODES", ",".join(MODES)).split(",")
    reports = []
    for mode in modes if "lifecycle" in parts else ():
        print(f"  fleet, {mode} retryAfterSeconds: {sizes.fleet_clusters} clusters", flush=True)
        report = drive_fleet(mode, sizes)
        print(
            f"    hold/work p50 {report.ratio_p50:.2f} p95 {report.ratio_p95:.2f}, "
            f"{report.calls_per_step:.1f} calls/step, wall p50 {report.wall_p50:.0f} s "
            f"(ideal {report.ideal:.0f} s), hook p99 {report.latency_p99_ms:.0f} ms at "
            f"{report.call_rate:.0f} calls/s, held {report.held_share:.0%}, runs {report.runs}, "
            f"CPU ms per run web {report.cpu_per_run_ms('web'):.1f} worker "
            f"{report.cpu_per_run_ms('worker'):.1f} postgres "
            f"{report.cpu_per_run_ms('postgres'):.1f}",
            flush=True,
        )
        reports.append(report)
    durations = []
    if "durations" in parts:
        print("  hold/work by workflow length", flush=True)
        durations = fleet_durations.bench(sizes)
    capacity = fleet_capacity.bench(sizes) if "capacity" in parts else None
    db.reset()
    return Report(modes=reports, durations=durations, capacity=capacity)
