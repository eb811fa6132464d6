"""Benchmark 4: from a hook call's answer to its workflow's first step running.

gunicorn and two worker processes run; one client calls BeforeClusterUpgrade for new
clusters over one keep-alive HTTPS connection, one call every 200 ms. Each call creates a run
and wakes the worker; the first step's `started_at` is compared with the moment the client
had the answer (and with the moment it sent the call).
"""

from __future__ import annotations

import dataclasses
import datetime
import http.client
import ssl
import statistics
import time

from bench import db, env, hooks, procs


@dataclasses.dataclass
class Report:
    calls: int
    from_answer_ms: list[float]
    from_request_ms: list[float]
    web_rss_mib: list[float]
    worker_rss_mib: list[float]

    @staticmethod
    def p(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.from_answer_ms)


def bench(sizes: env.Sizes) -> Report:
    from workflows.models import StepRun

    db.reset()
    db.flush_redis()
    hooks.create_template()
    sent: dict[str, float] = {}
    answered: dict[str, float] = {}
    with procs.web() as web, procs.worker(name="worker-start") as worker:
        context = ssl.create_default_context(cafile=str(procs.tls_dir() / "ca.crt"))
        conn = http.client.HTTPSConnection("127.0.0.1", web.port, context=context, timeout=30)
        for n in range(sizes.start_calls):
            i = 500_000 + n
            sent[db.cluster_uid(i)] = time.time()
            conn.request(
                "POST",
                hooks.PATH,
                body=hooks.body_for(i),
                headers={"Content-Type": "application/json"},
            )
            conn.getresponse().read()
            answered[db.cluster_uid(i)] = time.time()
            time.sleep(0.2)
        conn.close()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            started = StepRun.objects.filter(position=0, started_at__isnull=False).count()
            if started >= sizes.start_calls:
                break
            time.sleep(0.2)
        web_rss = [procs.rss_mib(p) for p in web.workers()]
        worker_rss = [procs.rss_mib(p) for p in worker.tree()]
    rows = StepRun.objects.filter(position=0).values_list("run__cluster_key", "started_at")
    from_answer, from_request = [], []
    for key, started_at in rows:
        if started_at is None:
            continue
        at = started_at.astimezone(datetime.UTC).timestamp()
        from_answer.append((at - answered[key]) * 1000)
        from_request.append((at - sent[key]) * 1000)
    print(
        f"  {len(from_answer)} calls: median {statistics.median(from_answer):.0f} ms, "
        f"p99 {Report.p(from_answer, 0.99):.0f} ms from the answer",
        flush=True,
    )
    db.reset()
    return Report(
        calls=len(from_answer),
        from_answer_ms=from_answer,
        from_request_ms=from_request,
        web_rss_mib=web_rss,
        worker_rss_mib=worker_rss,
    )
