"""The opt-in soak (`make soak`): a fleet through create, chained upgrade and delete, under faults.

A scripted fleet (200 clusters by default) is driven the way CAPI drives it: each cluster
calls its next hook until it answers 0, then moves on. Meanwhile faults are injected at
random: a worker SIGKILLed, Redis restarted empty, PostgreSQL restarted, the web process
killed. At the end every cluster has finished its lifecycle, every step's side effect
happened exactly once, and no call got a 5xx, a Failure or a premature 0.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import servers
from tests.support.stack import Stack

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("HOOKSVC_SOAK") != "1", reason="opt-in: run `make soak`"),
]

CLUSTERS = int(os.environ.get("HOOKSVC_SOAK_CLUSTERS", "200"))
TIMEOUT = float(os.environ.get("HOOKSVC_SOAK_TIMEOUT", "1800"))
FAULT_EVERY = float(os.environ.get("HOOKSVC_SOAK_FAULT_SECONDS", "20"))

LIFECYCLE: list[tuple[str, dict[str, str]]] = [
    ("BeforeClusterCreate", {}),
    (
        "BeforeClusterUpgrade",
        {"fromKubernetesVersion": "v1.30.0", "toKubernetesVersion": "v1.32.0"},
    ),
    (
        "BeforeControlPlaneUpgrade",
        {"fromKubernetesVersion": "v1.30.0", "toKubernetesVersion": "v1.31.0"},
    ),
    ("AfterControlPlaneUpgrade", {"kubernetesVersion": "v1.31.0"}),
    (
        "BeforeControlPlaneUpgrade",
        {"fromKubernetesVersion": "v1.31.0", "toKubernetesVersion": "v1.32.0"},
    ),
    ("AfterControlPlaneUpgrade", {"kubernetesVersion": "v1.32.0"}),
    (
        "BeforeWorkersUpgrade",
        {"fromKubernetesVersion": "v1.30.0", "toKubernetesVersion": "v1.32.0"},
    ),
    ("AfterWorkersUpgrade", {"kubernetesVersion": "v1.32.0"}),
    ("AfterClusterUpgrade", {"kubernetesVersion": "v1.32.0"}),
    ("BeforeClusterDelete", {}),
]
HOOKS = sorted({hook for hook, _ in LIFECYCLE})


def moment_of(hook: str, fields: dict[str, str]) -> str:
    if hook == "BeforeClusterUpgrade":
        return fields["toKubernetesVersion"]
    if hook in ("BeforeControlPlaneUpgrade", "BeforeWorkersUpgrade"):
        return f"{fields['fromKubernetesVersion']}->{fields['toKubernetesVersion']}"
    return fields.get("kubernetesVersion", "")


@pytest.fixture
def stack(tls_files: servers.TLSFiles, tmp_path: Path) -> Iterator[Stack]:
    stack = Stack(tmp_path / "stack", tls_files, workers=2)
    yield stack
    stack.close()


def test_a_fleet_survives_random_faults(stack: Stack, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    for hook in HOOKS:
        stack.apply(
            [
                {"name": "work", "type": "record", "with": {"effectsDir": str(effects)}},
                {"name": "settle", "type": "wait", "with": {"seconds": 1}, "dependsOn": ["work"]},
            ],
            name=f"soak-{hook.lower()}",
            hook=hook,
        )
    answers: list[tuple[float, str, str, str, int, dict[str, Any]]] = []
    done = threading.Event()
    # A seeded generator: a failing soak can be replayed with the same faults.
    rng = random.Random(int(os.environ.get("HOOKSVC_SOAK_SEED", "1")))  # noqa: S311
    faults: list[str] = []

    def drive(cluster: str) -> None:
        for hook, fields in LIFECYCLE:
            while True:
                assert not done.is_set(), "soak timed out"
                try:
                    status, body = stack.call(cluster, hook, **fields)
                except OSError:
                    time.sleep(1)  # the web process is down: CAPI retries
                    continue
                answers.append((time.time(), cluster, hook, moment_of(hook, fields), status, body))
                if (
                    status == 200
                    and body.get("status") == "Success"
                    and body.get("retryAfterSeconds", 0) == 0
                ):
                    break
                time.sleep(min(body.get("retryAfterSeconds", 1), 2))

    def inject() -> None:
        while not done.wait(FAULT_EVERY):
            fault = rng.choice(["worker", "redis", "postgres", "web"])
            faults.append(fault)
            if fault == "worker":
                worker = rng.choice(stack.workers)
                worker.kill()
                worker.start()
            elif fault == "redis":
                stack.redis.stop()
                time.sleep(2)
                stack.redis.start()
            elif fault == "postgres":
                stack.pg.stop()
                time.sleep(2)
                stack.pg.start()
            else:
                stack.kill_web()
                time.sleep(1)
                stack.start_web()

    injector = threading.Thread(target=inject, daemon=True)
    started = time.monotonic()
    injector.start()
    timer = threading.Timer(TIMEOUT, done.set)
    timer.start()
    try:
        with futures.ThreadPoolExecutor(32) as pool:
            for result in [pool.submit(drive, f"soak-{i:03d}") for i in range(CLUSTERS)]:
                result.result()
    finally:
        done.set()
        timer.cancel()
        injector.join()
    print(
        f"soak: {CLUSTERS} clusters, {len(answers)} calls, faults {faults},"
        f" {time.monotonic() - started:.0f} s"
    )

    with psycopg.connect(stack.pg.url) as conn:
        rows = conn.execute(
            "SELECT cluster_name, hook, moment, state, extract(epoch FROM finished_at)"
            " FROM workflows_run"
        ).fetchall()
    finished = {(c, h, m): float(at) for c, h, m, state, at in rows if state == "succeeded"}
    assert len(finished) == CLUSTERS * len(LIFECYCLE), (
        "every moment of every cluster has one finished run"
    )
    for at, cluster, hook, key, status, body in answers:
        assert status == 200 and body["status"] == "Success", body
        if body.get("retryAfterSeconds", 0) == 0:
            assert at >= finished[(cluster, hook, key)], f"{cluster} {hook} {key} let go too early"
    created = list(effects.glob("*.effect"))
    assert len(created) == CLUSTERS * len(LIFECYCLE), "each side effect happened exactly once"
