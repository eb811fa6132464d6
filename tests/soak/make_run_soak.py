"""`make soak-run`: `make run`'s own stack, as a new user gets it, driven by a fleet for a while.

Starts `make run`'s command (hooksvc.serving.devserver) on a fresh data directory with nothing
exported (the local PostgreSQL and broker), applies templates with `manage.py apply_workflows`
beside it, and drives fleets of SOAK_RUN_CLUSTERS (120) Clusters through create, a chained
upgrade and delete the way CAPI's topology controller calls the hooks
(tests/support/capi_client.py) until SOAK_RUN_MINUTES (30) are over, one fleet after another.
The templates hold each Cluster on a person's approval (create), a wait (the upgrade), an http
step that fails for one Cluster in four until an operator retries it (each control plane
upgrade), and waits after it. An operator, in this process with the settings a manage.py beside
`make run` gets, bulk-approves and bulk-retries every 15 s (workflows.operators.bulk).

At the end it reports what a user would have seen go wrong: hook calls with no answer or an
error, `make run` restarting a process or ending, a worker's "Unrecoverable error", tracebacks,
lifecycles that did not finish; and stops `make run` with SIGTERM. With SOAK_RUN_OUTPUT it
writes the report there (docs/soak-run.md). Exit status 0 when nothing went wrong.
"""

from __future__ import annotations

import dataclasses
import datetime
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support import capi_client, servers

ROOT = servers.ROOT
MINUTES = float(os.environ.get("SOAK_RUN_MINUTES", "30"))
CLUSTERS = int(os.environ.get("SOAK_RUN_CLUSTERS", "120"))
OUTPUT = os.environ.get("SOAK_RUN_OUTPUT", "")
DATA_DIR = Path(os.environ.get("SOAK_RUN_DATA_DIR", str(ROOT / "var" / "soak-run")))
#: One Cluster in this many has its http step fail until an operator retries it.
FAILING_EVERY = 4
OPERATOR_SECONDS = 15.0


class Flaky(http.server.BaseHTTPRequestHandler):
    """The http steps' endpoint: 500 for a Cluster named in `broken`, else 204."""

    broken: set[str] = set()
    fixed: set[str] = set()
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        cluster = str(body.get("cluster", {}).get("name", ""))
        with self.lock:
            failing = cluster in self.broken and cluster not in self.fixed
        self.send_response(500 if failing else 204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def templates(endpoint: str) -> str:
    """The soak's templates, one YAML stream for apply_workflows."""

    def doc(name: str, hook: str, steps: str, extra: str = "") -> str:
        return (
            f"apiVersion: hooksvc/v1alpha1\nkind: WorkflowTemplate\nmetadata:\n  name: {name}\n"
            f"spec:\n  hook: {hook}\n{extra}  steps:\n{steps}"
        )

    # The http step POSTs the run's context, its Cluster's name in it: the endpoint fails
    # one Cluster in FAILING_EVERY until the operator has seen it fail.
    notify = (
        "    - name: notify\n      type: http\n      retries: 0\n"
        f"      with: {{url: '{endpoint}/notify'}}\n"
    )
    return "---\n".join(
        [
            doc(
                "soak-approve-create",
                "BeforeClusterCreate",
                "    - name: approve\n      type: approval\n"
                "      with: {message: 'Check the new cluster, then approve'}\n",
            ),
            doc(
                "soak-upgrade-wait",
                "BeforeClusterUpgrade",
                "    - name: settle\n      type: wait\n      with: {seconds: 10}\n",
            ),
            doc(
                "soak-control-plane",
                "BeforeControlPlaneUpgrade",
                notify + "    - name: settle\n      type: wait\n      with: {seconds: 3}\n"
                "      dependsOn: [notify]\n",
            ),
            doc(
                "soak-delete",
                "BeforeClusterDelete",
                "    - name: settle\n      type: wait\n      with: {seconds: 2}\n",
            ),
        ]
    )


@dataclasses.dataclass
class Tally:
    calls: int = 0
    no_answer: int = 0
    not_ok: Counter[str] = dataclasses.field(default_factory=Counter)
    latencies: list[float] = dataclasses.field(default_factory=list)
    lifecycles: int = 0
    unfinished: int = 0
    fleets: int = 0
    approved: int = 0
    retried: int = 0
    operator_errors: list[str] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def observe(
        self,
        cluster: capi_client.Cluster,
        step: capi_client.HookStep,
        sent: float,
        took: float,
        reply: capi_client.Reply,
    ) -> None:
        with self.lock:
            self.calls += 1
            self.latencies.append(took)
            if reply.http_status == 0:
                self.no_answer += 1
            elif reply.is_error:
                self.not_ok[f"HTTP {reply.http_status} {reply.status}"] += 1


def _environment() -> dict[str, str]:
    """A new user's shell: nothing of hooksvc's exported, the soak's data directory."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HOOKSVC_", "DATABASE_", "CELERY_", "PROMETHEUS_", "DJANGO_"))
    }
    env["HOOKSVC_DATA_DIR"] = str(DATA_DIR)
    return env


def start_make_run(port: int, log_path: Path) -> subprocess.Popen[bytes]:
    env = {**_environment(), "HOOKSVC_BIND": f"127.0.0.1:{port}", "PYTHONPATH": str(ROOT)}
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "hooksvc.serving.devserver"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 300
    while " ready." not in log_path.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"make run did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.5)
    return process


def apply_templates(endpoint: str) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "apply_workflows", "-f", "-"],
        cwd=ROOT,
        env=_environment(),
        input=templates(endpoint),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"apply_workflows failed:\n{done.stdout}{done.stderr}")


def operate(stop: threading.Event, tally: Tally) -> None:
    """Every OPERATOR_SECONDS: approve what waits for a person, fix and retry what failed."""
    # The settings a manage.py beside `make run` gets (hooksvc.devrun), quieter.
    os.environ.update(
        {
            "HOOKSVC_DATA_DIR": str(DATA_DIR),
            "DJANGO_SETTINGS_MODULE": "hooksvc.settings",
            "HOOKSVC_LOG_LEVEL": "WARNING",
        }
    )
    for name in ("DATABASE_URL", "CELERY_BROKER_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()
    from django.db import close_old_connections

    from workflows.models import Run
    from workflows.operators import bulk

    while not stop.wait(OPERATOR_SECONDS):
        try:
            waiting = list(Run.objects.filter(bulk.applies("approve")).values_list("id", flat=True))
            outcomes = bulk.perform("approve", waiting, actor="soak", reason="soak: looks good")
            failed = list(
                Run.objects.filter(bulk.applies("retry")).values_list("id", "cluster_name")
            )
            with Flaky.lock:
                Flaky.fixed.update(name for _, name in failed)
            outcomes += bulk.perform(
                "retry", [i for i, _ in failed], actor="soak", reason="soak: endpoint fixed"
            )
            with tally.lock:
                tally.approved += sum(o.ok for o in outcomes[: len(waiting)])
                tally.retried += sum(o.ok for o in outcomes[len(waiting) :])
                tally.operator_errors += [o.message for o in outcomes if not o.ok][:5]
        except Exception as exc:  # reported, and the next round tries again
            tally.operator_errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            close_old_connections()


def drive(port: int, tally: Tally, until: float) -> None:
    ca = DATA_DIR / "tls" / "ca.crt"
    while time.time() < until:
        fleet = tally.fleets
        clusters = [
            capi_client.Cluster(
                name=f"soak-{fleet}-{i}",
                namespace="soak",
                uid=f"soak-{fleet}-{i}-{os.getpid()}",
                steps=capi_client.lifecycle(),
            )
            for i in range(CLUSTERS)
        ]
        with Flaky.lock:
            Flaky.broken.update(c.name for c in clusters[::FAILING_EVERY])
        # A transport per fleet: its connections (one per calling thread) close with it.
        with capi_client.HTTPSTransport("localhost", port, ca) as transport:
            controller = capi_client.Controller(transport, observe=tally.observe)
            capi_client.drive(controller, clusters, timeout=max(60.0, until - time.time() + 900))
        with tally.lock:
            tally.fleets += 1
            tally.lifecycles += sum(c.done for c in clusters)
            tally.unfinished += sum(not c.done for c in clusters)


#: What `make run`'s terminal says when something went wrong.
PATTERNS = {
    "restarts": re.compile(r"^make run: .* starting it again", re.M),
    "gave up": re.compile(r"^make run: .* giving up", re.M),
    "unrecoverable errors": re.compile(r"Unrecoverable error", re.M),
    "tracebacks": re.compile(r"^    \(a traceback of \d+ lines|^Traceback \(most recent", re.M),
    "ERROR/CRITICAL lines": re.compile(r"^\S+ \S+ (ERROR|CRITICAL) ", re.M),
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def report(
    tally: Tally, log: str, code: int | None, stop_seconds: float, began: float
) -> list[str]:
    seen = {name: len(p.findall(log)) for name, p in PATTERNS.items()}
    lines = [
        f"- {datetime.datetime.now(datetime.UTC):%Y-%m-%d}: {(time.time() - began) / 60:.0f}"
        f" minutes of `make run` (default broker: its local Redis), {tally.fleets} fleets of"
        f" {CLUSTERS} Clusters through create (approval), a chained upgrade (a wait; an http"
        f" step failing for one Cluster in {FAILING_EVERY} until retried, then a wait) and"
        " delete (a wait).",
        f"- Lifecycles finished: {tally.lifecycles}; unfinished: {tally.unfinished}.",
        f"- Hook calls: {tally.calls}; no answer: {tally.no_answer}; errors:"
        f" {sum(tally.not_ok.values())} {dict(tally.not_ok) or ''}".rstrip(),
        f"- Hook call latency p50 {percentile(tally.latencies, 0.5) * 1000:.0f} ms,"
        f" p99 {percentile(tally.latencies, 0.99) * 1000:.0f} ms, max"
        f" {max(tally.latencies, default=0) * 1000:.0f} ms.",
        f"- Operator: {tally.approved} approvals and {tally.retried} retries in bulk;"
        f" refused: {len(tally.operator_errors)} {tally.operator_errors[:3] or ''}".rstrip(),
        "- `make run`: " + ", ".join(f"{name} {n}" for name, n in seen.items()) + ".",
        f"- `make run` stopped {stop_seconds:.1f} s after SIGTERM, exit status {code}.",
        "- The machine's load average at the end: "
        + ", ".join(f"{n:.1f}" for n in os.getloadavg())
        + " (1, 5, 15 minutes).",
    ]
    return lines


def ok(tally: Tally, log: str, code: int | None) -> bool:
    bad = sum(len(p.findall(log)) for p in PATTERNS.values())
    return (
        bad == 0
        and code == 0
        and tally.unfinished == 0
        and tally.no_answer == 0
        and not tally.not_ok
        and not tally.operator_errors
    )


def main() -> int:
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    DATA_DIR.mkdir(parents=True)
    log_path = DATA_DIR / "make-run.log"
    endpoint = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=endpoint.serve_forever, daemon=True).start()
    port = servers.free_port()
    began = time.time()
    print(f"soak-run: make run on port {port}, its log in {log_path}", flush=True)
    process = start_make_run(port, log_path)
    tally = Tally()
    stop = threading.Event()
    try:
        apply_templates(f"http://127.0.0.1:{endpoint.server_address[1]}")
        operator = threading.Thread(target=operate, args=(stop, tally), daemon=True)
        operator.start()
        drive(port, tally, until=began + MINUTES * 60)
    finally:
        stop.set()
        sent = time.monotonic()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            code: int | None = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            code = None
        stop_seconds = time.monotonic() - sent
        endpoint.shutdown()
    log = log_path.read_text(errors="replace")
    lines = report(tally, log, code, stop_seconds, began)
    print("\n".join(lines))
    if OUTPUT:
        Path(OUTPUT).write_text(
            "# `make soak-run`: `make run` under a fleet\n\n"
            "What `make soak-run` (tests/soak/make_run_soak.py) reported on its last full run on"
            " a 2-core machine shared with other work:\n\n" + "\n".join(lines) + "\n"
        )
    return 0 if ok(tally, log, code) else 1


if __name__ == "__main__":
    sys.exit(main())
