"""A rolling upgrade from the previous release, mid-fleet, with nothing lost.

The previous release (tests/deploy/releases.py: the newest entry of releases.json, its tree
from this clone's history) serves a fleet through a real web, worker and beat against a
database it migrated and a Redis of the test's own. CAPI's topology controller drives the
fleet (tests/support/capi_client.py: its hook cache, rate limit and Go transport), through a
TCP proxy standing in for the Service (tests/support/tcpproxy.py). Mid-flight, this
checkout's code upgrades it the way the chart and k8s/ do:

- the migrate Job: `manage.py migrate`, while every process of the previous release runs;
- web (RollingUpdate, maxSurge 1, maxUnavailable 0): a new web until it is ready; the old
  one's endpoint removed, its preStop sleep, then SIGTERM;
- worker (RollingUpdate): a new worker up, the old one SIGTERMed: Celery's warm shutdown
  (celery/apps/worker.py, `install_worker_term_handler`) finishes the tasks it holds;
- beat (Recreate): the old one stopped, then the new one started.

Judged as an operator would: every run finishes once (one run per Cluster, succeeded, its
`http` step's call received once), no hook let go before its run finished, no call answered
Failure or not answered, no ERROR or traceback in any process's log, and no lifecycle held
longer than its work plus HOLD_BOUND_SECONDS (docs/deploy.md, "What an operator sees").
"""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.deploy import processes, releases
from tests.support import capi_client, private, servers, tcpproxy, worker

pytestmark = pytest.mark.slow

#: The `wait` step of every run: the work a lifecycle is held for, besides the http call.
WORK_SECONDS = 3
#: What a lifecycle may be held beyond its work during the upgrade: the run's start (a
#: message to the worker), retryAfterSeconds answered in whole seconds and CAPI's one
#: reconcile a second (up to 2 s), a worker's warm shutdown handing a step over, and the
#: slowness of a machine running two releases at once. docs/deploy.md states it.
HOLD_BOUND_SECONDS = 15
#: A Cluster reaches the hook every START_GAP_SECONDS until the upgrade is done: runs are
#: in flight through every stage of it.
START_GAP_SECONDS = 2.0
#: The preStop sleep of the web pods (k8s/base/web.yaml: 5 s; shorter here, same order).
PRESTOP_SECONDS = 1.0
HOOK = "BeforeClusterUpgrade"


class Receiver:
    """The `http` step's endpoint: counts every call by its Idempotency-Key."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        lock = threading.Lock()
        calls = self.calls

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                key = self.headers.get("Idempotency-Key", "")
                with lock:
                    calls[key] = calls.get(key, 0) + 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/done"

    @contextlib.contextmanager
    def running(self) -> Iterator[Receiver]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            thread.join(timeout=10)


class Fleet:
    """Every process of both releases, with the environment each one gets."""

    def __init__(self, root: Path, database_url: str, broker_url: str, tls: Path) -> None:
        self.root, self.database_url, self.broker_url, self.tls = (
            root,
            database_url,
            broker_url,
            tls,
        )
        self.procs: dict[str, processes.Pid1] = {}
        self.stack = contextlib.ExitStack()

    def env(self, tree: Path, name: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        data_dir = self.root / name
        data_dir.mkdir(exist_ok=True)
        return processes.production_env(
            database_url=self.database_url,
            data_dir=data_dir,
            extra={
                # The code of `tree`, whatever the virtualenv holds.
                "PYTHONPATH": str(tree),
                "CELERY_BROKER_URL": self.broker_url,
                "HOOKSVC_TLS_DIR": str(self.tls),
                **(extra or {}),
            },
        )

    def manage(self, tree: Path, name: str, *args: str, stdin: str | None = None) -> None:
        log = self.root / f"{name}.log"
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=tree,
            env=self.env(tree, name),
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        log.write_text(done.stdout + done.stderr)
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"

    def start(
        self, tree: Path, name: str, *command: str, extra: dict[str, str] | None = None
    ) -> processes.Pid1:
        """A process as its container runs it: the tree's entrypoint, from the tree."""
        script = str(tree / "docker-entrypoint.sh")
        env = self.env(tree, name, extra)
        proc = self.stack.enter_context(
            _in_tree(tree, ["/bin/sh", script, *command], env, self.root / f"{name}.log")
        )
        self.procs[name] = proc
        return proc

    def web(self, tree: Path, name: str, **extra: str) -> tuple[processes.Pid1, int]:
        port = servers.free_port()
        settings = {"HOOKSVC_BIND": f"127.0.0.1:{port}", "HOOKSVC_WEB_WORKERS": "1", **extra}
        return self.start(tree, name, "web", extra=settings), port

    def worker(self, tree: Path, name: str) -> processes.Pid1:
        proc = self.start(
            tree, name, "worker", "--concurrency", "2", "--without-gossip", "--without-mingle"
        )
        proc.wait_for_line("ready.", timeout=120)
        return proc

    def beat(self, tree: Path, name: str) -> processes.Pid1:
        return self.start(tree, name, "beat", "-s", str(self.root / name / "celerybeat-schedule"))


@contextlib.contextmanager
def _in_tree(
    tree: Path, command: list[str], env: dict[str, str], log: Path
) -> Iterator[processes.Pid1]:
    with log.open("ab") as out:
        outer = subprocess.Popen(
            command, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    running = processes.Child(outer, log)
    try:
        yield running
    finally:
        running.kill()


class Arrivals:
    """Clusters reaching the hook one after another, START_GAP_SECONDS apart, until stopped;
    each lifecycle driven on its own (capi_client.drive), as CAPI reconciles Clusters."""

    def __init__(self, controller: capi_client.Controller) -> None:
        self.controller = controller
        self.clusters: list[capi_client.Cluster] = []
        self.results: list[bool] = []
        self._drivers: list[threading.Thread] = []
        self._stop = threading.Event()
        self._feeder = threading.Thread(target=self._feed, daemon=True)
        self.began = 0.0

    def start(self) -> None:
        self.began = time.time()
        self._feeder.start()

    def _feed(self) -> None:
        step = capi_client.HookStep(
            HOOK,
            {"fromKubernetesVersion": "v1.30.0", "toKubernetesVersion": "v1.31.0"},
            blocking=True,
            chained=False,
            version="v1.31.0",
        )
        while True:
            # Once stopped, one more Cluster: all of its lifecycle on the new release.
            last = self._stop.is_set()
            n = len(self.clusters)
            cluster = capi_client.Cluster(f"c{n:02d}", "fleet", f"uid-upgrade-{n:02d}", [step])
            self.clusters.append(cluster)
            driver = threading.Thread(
                target=lambda c=cluster: self.results.append(
                    capi_client.drive(self.controller, [c], concurrency=1, timeout=180)
                ),
                daemon=True,
            )
            driver.start()
            self._drivers.append(driver)
            if last:
                return
            self._stop.wait(START_GAP_SECONDS)

    def stop(self) -> list[capi_client.Cluster]:
        """One more Cluster, then no more; the Clusters that came."""
        if self._feeder.is_alive():
            self._stop.set()
            self._feeder.join(timeout=START_GAP_SECONDS + 10)
        return list(self.clusters)

    def finished(self, timeout: float) -> list[bool]:
        deadline = time.monotonic() + timeout
        for driver in self._drivers:
            driver.join(timeout=max(0.0, deadline - time.monotonic()))
        return [not d.is_alive() for d in self._drivers] + self.results


def _template(receiver: Receiver) -> str:
    return json.dumps(
        {
            "apiVersion": "hooksvc/v1alpha1",
            "kind": "WorkflowTemplate",
            "metadata": {"name": "upgrade-gate"},
            "spec": {
                "hook": HOOK,
                "retryAfterSeconds": 2,
                "steps": [
                    {"name": "notify", "type": "http", "with": {"url": receiver.url}},
                    {"name": "settle", "type": "wait", "with": {"seconds": WORK_SECONDS}},
                ],
            },
        }
    )


def _runs(database_url: str) -> list[tuple[str, str, int, float | None]]:
    """(cluster, state, runs of it, finished at as a UNIX time) per Cluster."""
    with psycopg.connect(database_url, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT cluster_name, min(state), count(*), max(extract(epoch FROM finished_at))"
            " FROM workflows_run GROUP BY cluster_name ORDER BY cluster_name"
        ).fetchall()
    return [(str(c), str(s), int(n), float(f) if f is not None else None) for c, s, n, f in rows]


def _running(database_url: str) -> int:
    with psycopg.connect(database_url, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(*) FROM workflows_run WHERE state = 'running'").fetchone()
    return int(row[0]) if row else 0


def test_a_fleet_upgraded_mid_flight_from_the_previous_release_loses_nothing(
    tls_files: servers.TLSFiles, tmp_path: Path, django_db_setup: object
) -> None:
    previous = releases.previous()
    old = releases.extract(previous, tmp_path / f"release-{previous.version}")
    foreign = releases.foreign_pins(old)
    assert not foreign, (
        f"release {previous.version} pins packages this virtualenv does not have; run it"
        f" from a virtualenv of its own requirements: {foreign}"
    )
    new = servers.ROOT
    redis = private.PrivateRedis(tmp_path / "redis")
    redis.start()
    receiver = Receiver()
    proxy = tcpproxy.Proxy(tls_files.ca_file)
    with contextlib.ExitStack() as stack:
        stack.callback(redis.stop)
        url = stack.enter_context(processes.fresh_database("upgrade"))
        stack.enter_context(receiver.running())
        stack.enter_context(proxy.running())
        fleet = Fleet(tmp_path, url, redis.url, tls_files.server_dir)
        stack.enter_context(fleet.stack)

        # The previous release, serving.
        fleet.manage(old, "migrate-old", "migrate", "--noinput")
        fleet.manage(old, "apply-old", "apply_workflows", "-f", "-", stdin=_template(receiver))
        old_web, port = fleet.web(old, "web-old")
        old_backend = proxy.add("web-old", port)
        fleet.beat(old, "beat-old")
        old_worker = fleet.worker(old, "worker-old")
        proxy.wait_until("the old web ready", lambda: old_backend.ready, timeout=120)

        # The fleet, CAPI-driven, its Clusters starting one after another.
        transport = stack.enter_context(
            capi_client.HTTPSTransport("127.0.0.1", proxy.port, tls_files.ca_file)
        )
        controller = capi_client.Controller(transport, clock=time.time)
        arrivals = Arrivals(controller)
        stack.callback(arrivals.stop)
        arrivals.start()
        stages: dict[str, int] = {}

        def in_flight(stage: str) -> None:
            """Wait (bounded) until a run is in flight: each stage meets one."""
            worker.wait_for(lambda: _running(url) >= 1, timeout=60, what=f"a run at {stage}")
            stages[stage] = _running(url)

        # The upgrade: the migrate Job, then each Deployment's rollout.
        in_flight("the migrate Job")
        fleet.manage(new, "migrate-new", "migrate", "--noinput")
        _, port = fleet.web(new, "web-new", HOOKSVC_WEB_DRAIN_SECONDS="2")
        new_backend = proxy.add("web-new", port)
        proxy.wait_until("the new web ready", lambda: new_backend.ready, timeout=120)
        in_flight("web's rollout")
        proxy.remove(old_backend)
        # The old pod's preStop hook: a fixed sleep there too (nothing waits on its end).
        time.sleep(PRESTOP_SECONDS)
        code, _ = old_web.sigterm(within=35)
        assert code == 0, old_web.log()
        fleet.worker(new, "worker-new")
        in_flight("worker's rollout")
        code, _ = old_worker.sigterm(within=60)
        assert code == 0, old_worker.log()
        in_flight("beat's recreation")
        code, _ = fleet.procs["beat-old"].sigterm(within=30)
        assert code == 0, fleet.procs["beat-old"].log()
        fleet.beat(new, "beat-new")
        upgraded = time.time() - arrivals.began
        # One more Cluster, all of it on the new release; then every lifecycle ends.
        clusters = arrivals.stop()
        assert all(arrivals.finished(timeout=180)), "lifecycles unfinished after 180 s"
        runs = _runs(url)
        logs = {name: proc.log() for name, proc in fleet.procs.items()}
    print(f"upgraded {upgraded:.1f} s after the first Cluster started")
    print(f"runs in flight at each stage: {stages}")
    holds = sorted(round(c.records[0].hold or 0, 1) for c in clusters)
    print(f"holds (s) for {WORK_SECONDS} s of work: {holds}")
    # Every run once: one per Cluster, succeeded, its http call made once.
    assert [(c, s, n) for c, s, n, _ in runs] == [(c.name, "succeeded", 1) for c in clusters]
    assert sorted(receiver.calls.values()) == [1] * len(clusters), receiver.calls
    for cluster, (_, _, _, finished) in zip(clusters, runs, strict=True):
        record = cluster.records[0]
        assert record.errors == 0, f"{cluster.name}: {record.errors} calls failed"
        assert record.released is not None and finished is not None
        assert record.released >= finished, f"{cluster.name} let go before its run finished"
        assert record.hold is not None and record.hold <= WORK_SECONDS + HOLD_BOUND_SECONDS, (
            f"{cluster.name} held {record.hold:.1f} s for {WORK_SECONDS} s of work"
        )
    for name, log in logs.items():
        for bad in ("Traceback", " ERROR ", " CRITICAL "):
            assert bad not in log, f"{name}:\n{log}"
