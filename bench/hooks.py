"""Benchmark 1: hook answers under load, beside /healthz on the same server and TLS.

The table holds `clusters` clusters' runs: each one's current upgrade (the moment the load
polls; half running, half succeeded) and older finished upgrades, `runs` in all. wrk POSTs
CAPI-shaped BeforeClusterUpgrade requests over keep-alive HTTPS, cycling over the clusters,
so every call is a steady-state poll: the templates, the run, a hook-call record.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import db, env, procs, wrk
from tests.support import capi

PATH = capi.hook_path(db.HOOK)


def request_template() -> str:
    """The request body as a format string: %s for the cluster's name, then its uid."""
    cluster = capi.cluster_v1beta2(name="@@NAME@@", uid="@@UID@@")
    cluster["spec"]["controlPlaneRef"]["name"] = "cp"
    body = capi.hook_request(
        db.HOOK, cluster, fromKubernetesVersion=db.FROM_VERSION, toKubernetesVersion=db.TO_VERSION
    )
    text = json.dumps(body).replace("%", "%%")
    assert text.index("@@NAME@@") < text.index("@@UID@@")
    return text.replace("@@NAME@@", "%s").replace("@@UID@@", "%s")


def body_for(i: int) -> bytes:
    return (request_template() % (db.cluster_name(i), db.cluster_uid(i))).encode()


def template_spec() -> dict[str, Any]:
    from tests.support import workflows

    return workflows.spec(db.HOOK, [{"name": "only", "type": "noop"}])


def create_template(name: str = db.TEMPLATE) -> int:
    from workflows.models import WorkflowTemplate

    return WorkflowTemplate.objects.create(name=name, hook=db.HOOK, spec=template_spec()).pk


@dataclasses.dataclass
class Series:
    label: str
    results: list[wrk.Result]

    @property
    def peak(self) -> wrk.Result:
        return max(self.results, key=lambda r: r.rps)

    def near(self, fraction: float) -> wrk.Result:
        """The level at or below the peak's connections whose throughput is nearest
        `fraction` of the peak (the rising side of the curve: load below saturation)."""
        target = fraction * self.peak.rps
        rising = [r for r in self.results if r.connections <= self.peak.connections]
        return min(rising, key=lambda r: abs(r.rps - target))


def sweep(
    label: str, url: str, script: Any, connections: tuple[int, ...], seconds: float
) -> Series:
    results = []
    for c in connections:
        r = wrk.run(url, script, connections=c, seconds=seconds)
        print(
            f"  {label:<28} c={c:<3} {r.rps:8.0f} req/s  p50 {r.p50_ms:6.1f} ms  "
            f"p99 {r.p99_ms:6.1f} ms  errors {r.errors} non-2xx {r.non_2xx}",
            flush=True,
        )
        results.append(r)
    return Series(label, results)


def check_answer(web: procs.Web) -> dict[str, Any]:
    """One call by hand: the load must be getting real answers, not errors."""
    import http.client
    import ssl

    context = ssl.create_default_context(cafile=str(procs.tls_dir() / "ca.crt"))
    conn = http.client.HTTPSConnection("127.0.0.1", web.port, context=context, timeout=10)
    conn.request("POST", PATH, body=body_for(1), headers={"Content-Type": "application/json"})
    answer: dict[str, Any] = json.loads(conn.getresponse().read())
    conn.close()
    assert answer["status"] == "Success" and answer["retryAfterSeconds"] > 0, answer
    return answer


def count_queries() -> dict[str, Any]:
    """The queries one steady-state call and one first call make (CaptureQueriesContext)."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    shapes = {}
    # Cluster 1 has a running run at the polled moment; cluster 999999 has none yet.
    for label, i in (("steady", 1), ("first", 999_999)):
        with CaptureQueriesContext(connection) as ctx:
            client.post(PATH, data=body_for(i), content_type="application/json")
        shapes[label] = [_shape(q["sql"]) for q in ctx.captured_queries]
    return shapes


def _shape(statement: str | None) -> str:
    # Django records no text for a statement psycopg ran prepared (HOOKSVC_DB_PREPARE):
    # its last_executed_query finds none on a server-binding cursor.
    if statement is None:
        return "(a prepared statement: its text is not recorded)"
    return statement.split(" WHERE ")[0][:90]


def profile(web: procs.Web, script: Any, seconds: float) -> list[tuple[str, float]]:
    """py-spy on one gunicorn worker while wrk loads the server: inclusive share per function."""
    pid = web.workers()[0].pid
    out = env.DATA_DIR / "hook-profile.txt"
    spy = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "-p",
            str(pid),
            "-d",
            str(max(3, round(seconds))),
            "-r",
            "200",
            "-f",
            "raw",
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1)
    wrk.run(web.url + PATH, script, connections=16, seconds=seconds)
    spy.wait(timeout=120)
    if spy.returncode != 0 or not out.exists():
        return []
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        seen = set()
        for frame in stack.split(";"):
            name = frame.split(" (")[0]
            where = frame.split(" (")[-1].split(":")[0].rstrip(")")
            key = f"{name} ({_short(where)})"
            if key not in seen:
                seen.add(key)
                inclusive[key] += n
    return [(k, 100 * v / total) for k, v in inclusive.most_common(60)] if total else []


def _short(path: str) -> str:
    for marker in ("site-packages/", "/wt-bench/", "python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


@dataclasses.dataclass
class Report:
    healthz: Series
    hook: Series
    hook_small: Series
    sync_healthz: Series
    sync_hook: Series
    asgi_healthz: Series
    asgi_hook: Series
    queries: dict[str, Any]
    profile: list[tuple[str, float]]
    web_rss_mib: list[float]
    runs: int
    clusters: int
    answer: dict[str, Any]


def bench(sizes: env.Sizes) -> Report:
    db.reset()
    template_id = create_template()
    spec = template_spec()
    print(f"seeding {sizes.runs} runs for {sizes.clusters} clusters", flush=True)
    started = time.monotonic()
    db.seed_runs(
        template_id=template_id,
        spec=spec,
        clusters=sizes.clusters,
        runs=sizes.runs,
        polled_only=False,
    )
    print(f"  seeded in {time.monotonic() - started:.1f} s", flush=True)
    post = wrk.post_script("hook", template=request_template(), path=PATH, clusters=sizes.clusters)
    get = wrk.get_script("healthz")
    queries = count_queries()
    with procs.web() as web:
        answer = check_answer(web)
        warm = max(1.0, sizes.wrk_seconds / 2)
        wrk.run(web.url + PATH, post, connections=4, seconds=warm)
        healthz = sweep(
            "gthread /healthz", web.url + "/healthz", get, sizes.connections, sizes.wrk_seconds
        )
        hook = sweep(
            f"gthread hook, {sizes.runs} runs",
            web.url + PATH,
            post,
            sizes.connections,
            sizes.wrk_seconds,
        )
        prof = profile(web, post, max(3.0, sizes.wrk_seconds))
        web_rss = [procs.rss_mib(p) for p in web.workers()]
    db.reset()
    template_id = create_template()
    db.seed_runs(
        template_id=template_id,
        spec=spec,
        clusters=sizes.clusters,
        runs=sizes.clusters,
        polled_only=True,
    )
    with procs.web() as web:
        wrk.run(web.url + PATH, post, connections=4, seconds=warm)
        small = sweep(
            f"gthread hook, {sizes.clusters} runs",
            web.url + PATH,
            post,
            sizes.connections,
            sizes.wrk_seconds,
        )
    levels = tuple(c for c in (1, 4, 16, 64) if c in sizes.connections) or sizes.connections
    with procs.web(worker_class="sync") as web:
        wrk.run(web.url + PATH, post, connections=4, seconds=warm)
        sync_healthz = sweep("sync /healthz", web.url + "/healthz", get, levels, sizes.wrk_seconds)
        sync_hook = sweep("sync hook", web.url + PATH, post, levels, sizes.wrk_seconds)
    with procs.asgi_web() as web:
        wrk.run(web.url + PATH, post, connections=4, seconds=warm)
        asgi_healthz = sweep(
            "uvicorn /healthz", web.url + "/healthz", get, levels, sizes.wrk_seconds
        )
        asgi_hook = sweep("uvicorn hook", web.url + PATH, post, levels, sizes.wrk_seconds)
    with contextlib.suppress(Exception):
        db.reset()
    return Report(
        healthz=healthz,
        hook=hook,
        hook_small=small,
        sync_healthz=sync_healthz,
        sync_hook=sync_hook,
        asgi_healthz=asgi_healthz,
        asgi_hook=asgi_hook,
        queries=queries,
        profile=prof,
        web_rss_mib=web_rss,
        runs=sizes.runs,
        clusters=sizes.clusters,
        answer=answer,
    )
