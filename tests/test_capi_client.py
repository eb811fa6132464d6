"""The CAPI client the fleet tests and benchmark use calls hooks when CAPI would, and only then.

Each rule is read in kubernetes-sigs/cluster-api at ae7ff04 (see tests/support/capi_client.py):
the hook cache (util/cache/cache.go, exp/topology/desiredstate/lifecycle_hooks.go), the
rate limiter (util/controller/controller.go, builder.go) and the order of the chained
upgrade's hooks (exp/topology/desiredstate/desired_state.go, computeControlPlaneVersion).
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
import time
from collections.abc import Iterator

from tests.support import capi_client, servers
from tests.support.capi_client import Cluster, Controller, Reply


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Script:
    """A hook server that answers from a list and records what was called when."""

    def __init__(self, clock: Clock, replies: list[Reply]) -> None:
        self.clock = clock
        self.replies: Iterator[Reply] = iter(replies)
        self.calls: list[tuple[float, str]] = []

    def post(self, path: str, body: bytes) -> Reply:
        self.calls.append((self.clock.now, path.rsplit("/", maxsplit=1)[-1]))
        self.clock.now += 0.01
        return next(self.replies)


def wait(seconds: int) -> Reply:
    return Reply(200, "Success", seconds, "workflow backup is running step snapshot")


PROCEED = Reply(200, "Success", 0)


def upgrade_cluster() -> Cluster:
    steps = capi_client.lifecycle()
    start = next(i for i, s in enumerate(steps) if s.hook == "AfterControlPlaneUpgrade")
    return Cluster("prod-eu-1", "fleet", "uid-1", steps[start:])


def test_the_chained_upgrade_calls_fourteen_blocking_hooks_in_capis_order() -> None:
    steps = capi_client.lifecycle()
    assert [s.label for s in steps] == [
        "BeforeClusterCreate",
        "AfterControlPlaneInitialized",
        "BeforeClusterUpgrade v1.30.0->v1.33.0",
        "BeforeControlPlaneUpgrade v1.30.0->v1.31.0",
        "AfterControlPlaneUpgrade v1.31.0",
        "BeforeControlPlaneUpgrade v1.31.0->v1.32.3",
        "AfterControlPlaneUpgrade v1.32.3",
        "BeforeWorkersUpgrade v1.30.0->v1.32.3",
        "AfterWorkersUpgrade v1.32.3",
        "BeforeControlPlaneUpgrade v1.32.3->v1.33.0",
        "AfterControlPlaneUpgrade v1.33.0",
        "BeforeWorkersUpgrade v1.32.3->v1.33.0",
        "AfterWorkersUpgrade v1.33.0",
        "AfterClusterUpgrade v1.33.0",
        "BeforeClusterDelete",
    ]
    assert sum(s.blocking for s in steps) == 14
    bcpu = steps[5]
    assert bcpu.fields["controlPlaneUpgrades"] == [{"version": "v1.32.3"}, {"version": "v1.33.0"}]
    assert bcpu.fields["workersUpgrades"] == [{"version": "v1.32.3"}, {"version": "v1.33.0"}]


def test_a_cached_answer_stops_calls_until_its_retry_after_runs_out() -> None:
    clock = Clock()
    server = Script(clock, [wait(10), PROCEED, PROCEED])
    controller = Controller(server, clock=clock)
    cluster = upgrade_cluster()

    first = controller.reconcile(cluster)
    assert first is not None and abs(first - (1000.01 + 10)) < 1e-6, "requeued for when it runs out"
    # Another reconcile (an event on the Cluster) before then reports the cached answer only.
    clock.now = 1005.0
    assert controller.reconcile(cluster) == first
    assert len(server.calls) == 1, "no call while the cache entry holds"

    clock.now = first
    controller.reconcile(cluster)
    assert [path for _, path in server.calls] == [
        "after-control-plane-upgrade",
        "after-control-plane-upgrade",
        "before-control-plane-upgrade",
    ], "a 0 lets go, and the next hook is called in the same reconcile"
    assert cluster.records[0].answers == [10, 0]
    assert cluster.records[0].hold is not None and abs(cluster.records[0].hold - 10.02) < 1e-6


def test_a_failure_is_not_cached_and_retried_with_the_rate_limiters_backoff() -> None:
    clock = Clock()
    failure = Reply(200, "Failure", 0, "workflow backup failed")
    server = Script(clock, [failure, failure, Reply(0, "", 0)])
    controller = Controller(server, clock=clock)
    cluster = upgrade_cluster()

    delays = []
    for _ in range(3):
        at = controller.reconcile(cluster)
        assert at is not None
        delays.append(round(at - clock.now, 3))
        clock.now = at
    assert delays == [1.005, 1.01, 1.02], "1 s + 5 ms * 2^failures, no cache entry"
    assert cluster.records[0].errors == 3


def test_a_cluster_is_reconciled_at_most_once_a_second() -> None:
    clock = Clock()
    server = Script(clock, [PROCEED, PROCEED])
    controller = Controller(server, clock=clock)
    cluster = Cluster("c", "fleet", "uid-c", capi_client.lifecycle()[:2])

    at = controller.reconcile(cluster)
    assert at == 1001.0, "create let go; the next hook waits for the next reconcile"
    clock.now = 1000.5
    assert controller.reconcile(cluster) == 1001.0
    assert len(server.calls) == 1


def test_drive_takes_a_fleet_through_its_lifecycle() -> None:
    """The workqueue with its workers, on the real clock: each Cluster gets its own order."""

    class Answers:
        def __init__(self) -> None:
            self.calls: dict[tuple[str, str], int] = {}

        def post(self, path: str, body: bytes) -> Reply:
            key = (path, body.decode())
            self.calls[key] = self.calls.get(key, 0) + 1
            if path.endswith("after-control-plane-initialized"):
                return PROCEED  # a non-blocking hook
            # Each blocking hook step holds once (1 s), then lets go.
            return wait(1) if self.calls[key] == 1 else PROCEED

    steps = capi_client.lifecycle()[:4]
    clusters = [Cluster(f"c{i}", "fleet", f"uid-{i}", steps) for i in range(3)]
    controller = Controller(Answers())
    assert capi_client.drive(controller, clusters, concurrency=2, timeout=60)
    for cluster in clusters:
        assert [r.answers for r in cluster.records] == [[1, 0], [0], [1, 0], [1, 0]]


def test_a_keep_alive_connection_the_server_closed_is_not_used_again(
    tls_files: servers.TLSFiles,
) -> None:
    """gunicorn closes keep-alive connections idle for 75 s; Go's transport, which CAPI
    uses, drops such a connection instead of sending on it (golang/go
    src/net/http/transport.go, persistConn.readLoop). A call after the server closed the
    connection must not fail (it used to, and failures back off up to 1000 s)."""

    class Once(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as gunicorn answers

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"status": "Success", "retryAfterSeconds": 0}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True  # then close, as an idle timeout does

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Once)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls_files.server_dir / "tls.crt", tls_files.server_dir / "tls.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with capi_client.HTTPSTransport(
            "127.0.0.1", server.server_address[1], tls_files.ca_file
        ) as transport:
            first = transport.post("/hook", b"{}")
            time.sleep(0.2)  # the server has closed the connection by now
            second = transport.post("/hook", b"{}")
    finally:
        server.shutdown()
        server.server_close()
    assert (first.is_error, second.is_error) == (False, False), (first, second)
