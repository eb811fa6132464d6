"""A web process that gets SIGTERM drains: nothing a client holds or sends is lost.

What Kubernetes does when a web pod goes (a rolling update, a node drain): the pod is taken
out of the Service's endpoints while the kubelet runs its preStop hook and then sends SIGTERM;
kube-proxy moves only new connections, so CAPI's kept-alive connections still reach the old
pod. CAPI's runtime client is a Go http.Transport (cluster-api
internal/runtime/client/client.go, `createHTTPClient`; each call is a POST of a
bytes.Buffer) that keeps connections alive and sends a POST again only if nothing of it was
written (golang/go src/net/http/transport.go, the resend check, and request.go
`isReplayable`): a connection closed under a call is a failed call.

What the web process does with SIGTERM (hooksvc/serving/gunicorn_worker.py, read against
gunicorn 27.0.1's gunicorn/arbiter.py `Arbiter.stop` and gunicorn/workers/gthread.py
`ThreadWorker.handle_exit`, `run`, `handle_request`): /readyz fails at once; for
HOOKSVC_WEB_DRAIN_SECONDS it keeps accepting and answering, every answer with
"Connection: close"; then it stops accepting and finishes the calls in flight; the master
waits for that up to its graceful_timeout.

The clients here keep one connection per thread and drop one the server closed while it was
idle, as Go's transport does (tests/support/capi_client.py); they never send a call again.
The load balancer is tests/support/tcpproxy.py, kube-proxy's part plus the kubelet's
readiness probe.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy import processes
from tests.support import capi, capi_client, servers, tcpproxy

pytestmark = pytest.mark.slow

#: Shorter than the default 5 s, to keep the suite quick; the drain is the same.
DRAIN_SECONDS = 2
#: How long a SIGTERMed web may take to exit: its drain, the calls it holds, the rest.
STOP_BOUND_SECONDS = DRAIN_SECONDS + processes.STOP_SECONDS + 5


@pytest.fixture(scope="module")
def migrated(django_db_setup: object) -> Iterator[str]:
    with processes.migrated_database("drain") as url:
        yield url


@contextlib.contextmanager
def web(
    migrated: str, tls: servers.TLSFiles, tmp_path: Path, name: str, *, workers: int = 2
) -> Iterator[tuple[processes.Pid1, int]]:
    """A web process as the image runs it (the entrypoint's `web`), on a port of its own."""
    port = servers.free_port()
    data_dir = tmp_path / name
    data_dir.mkdir()
    env = processes.production_env(
        database_url=migrated,
        data_dir=data_dir,
        extra={
            "HOOKSVC_TLS_DIR": str(tls.server_dir),
            "HOOKSVC_BIND": f"127.0.0.1:{port}",
            "HOOKSVC_WEB_WORKERS": str(workers),
            "HOOKSVC_WEB_DRAIN_SECONDS": str(DRAIN_SECONDS),
        },
    )
    with processes.as_child(processes.entrypoint("web"), env, data_dir / "log") as proc:
        yield proc, port


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("soon", "HOOKSVC_WEB_DRAIN_SECONDS must be a number, got 'soon'"),
        ("-1", "HOOKSVC_WEB_DRAIN_SECONDS must be between 0 and 60, got '-1'"),
        ("61", "HOOKSVC_WEB_DRAIN_SECONDS must be between 0 and 60, got '61'"),
    ],
)
def test_a_drain_that_is_not_a_number_of_seconds_stops_the_server_before_it_listens(
    value: str, error: str
) -> None:
    """gunicorn reads its configuration (which reads the drain) before it binds a port."""
    started = subprocess.run(
        [sys.executable, "-c", "import hooksvc.serving.gunicorn_conf"],
        cwd=servers.ROOT,
        env={**os.environ, "HOOKSVC_WEB_DRAIN_SECONDS": value},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode != 0
    assert started.stderr.strip().splitlines()[-1] == f"RuntimeError: {error}"


def _context(tls: servers.TLSFiles) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(tls.ca_file))


def _hook_call(name: str) -> bytes:
    cluster = capi.cluster_v1beta2(name, uid=f"uid-{name}")
    return json.dumps(capi.hook_request("BeforeClusterCreate", cluster)).encode()


HOOK_PATH = capi.hook_path("BeforeClusterCreate")


def _ready(port: int, tls: servers.TLSFiles) -> int:
    """/readyz's status on a new connection, 0 when the process does not answer."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=_context(tls), timeout=5)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return 0
    finally:
        conn.close()


def _exchange(conn: http.client.HTTPSConnection, body: bytes) -> tuple[dict[str, object], bool]:
    """One hook call on `conn`; its answer and whether the server closes the connection."""
    conn.request("POST", HOOK_PATH, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    answer = json.loads(response.read())
    assert response.status == 200, answer
    return answer, response.getheader("Connection", "").lower() == "close"


def test_a_web_process_fails_readiness_keeps_serving_and_finishes_what_it_holds(
    migrated: str, tls_files: servers.TLSFiles, tmp_path: Path
) -> None:
    with web(migrated, tls_files, tmp_path, "web", workers=1) as (proc, port):
        proc.wait_for("readiness", lambda: _ready(port, tls_files) == 200)
        kept = http.client.HTTPSConnection(
            "127.0.0.1", port, context=_context(tls_files), timeout=10
        )
        answer, closes = _exchange(kept, _hook_call("kept"))
        assert answer["status"] == "Success" and not closes, "a kept-alive connection"
        # A call the server holds: its headers and half its body are in, the rest comes
        # only after the drain is over.
        body = _hook_call("held")
        held = _context(tls_files).wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=10),
            server_hostname="127.0.0.1",
        )
        held.sendall(
            f"POST {HOOK_PATH} HTTP/1.1\r\nHost: hooksvc\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[: len(body) // 2]
        )
        sent = time.monotonic()
        proc.send(signal.SIGTERM)
        # Readiness fails while the process still accepts: the probe is a new connection.
        proc.wait_for("/readyz to fail", lambda: _ready(port, tls_files) == 503, timeout=10)
        # A call on a kept-alive connection is answered, and the connection closed after it
        # by the client's own reading of "Connection: close".
        answer, closes = _exchange(kept, _hook_call("kept"))
        assert answer["status"] == "Success" and closes
        kept.close()
        # The drain is over (no new connection is taken any more); the held call is not.
        proc.wait_for_line("Drained", timeout=DRAIN_SECONDS + 10)
        held.sendall(body[len(body) // 2 :])
        raw = _read_all(held)
        held.close()
        head, _, payload = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), raw[:200]
        assert b"connection: close" in head.lower(), head
        assert json.loads(payload)["status"] == "Success"
        code = proc.outer.wait(timeout=STOP_BOUND_SECONDS)
        print(f"web stopped {time.monotonic() - sent:.1f} s after SIGTERM")
    assert code == 0, proc.log()
    assert "Traceback" not in proc.log(), proc.log()


def _read_all(sock: ssl.SSLSocket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


#: Between two calls of one load thread.
PAUSE_SECONDS = 0.02


class Load:
    """Threads that call the hook through the proxy without pause until stopped."""

    def __init__(self, port: int, ca_file: Path, threads: int) -> None:
        self.transport = capi_client.HTTPSTransport("127.0.0.1", port, ca_file)
        self.replies: list[capi_client.Reply] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(n,), name=f"load-{n}", daemon=True)
            for n in range(threads)
        ]

    def _run(self, n: int) -> None:
        calls = 0
        # A short pause between calls: connections also sit idle a moment, as CAPI's do
        # between reconciles, and the machine is left some room for the servers.
        while not self._stop.wait(PAUSE_SECONDS):
            reply = self.transport.post(HOOK_PATH, _hook_call(f"load-{n}-{calls % 50}"))
            calls += 1
            with self._lock:
                self.replies.append(reply)

    def count(self) -> int:
        with self._lock:
            return len(self.replies)

    def wait_for_more(self, calls: int, timeout: float = 60) -> None:
        """Until `calls` more calls are answered (whatever the answer)."""
        target = self.count() + calls
        deadline = time.monotonic() + timeout
        while self.count() < target:
            assert time.monotonic() < deadline, f"{calls} calls not within {timeout} s"
            time.sleep(0.05)

    @contextlib.contextmanager
    def running(self) -> Iterator[Load]:
        for thread in self._threads:
            thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            for thread in self._threads:
                # A call's own bound is CALL_TIMEOUT_SECONDS.
                thread.join(timeout=capi_client.CALL_TIMEOUT_SECONDS + 5)
            self.transport.close()


def test_two_replicas_restarted_one_at_a_time_under_load_fail_no_call(
    migrated: str, tls_files: servers.TLSFiles, tmp_path: Path
) -> None:
    """A Deployment's rolling update (maxSurge 1, maxUnavailable 0) of two web replicas
    while clients keep calling: a new replica, ready; then the old one SIGTERMed."""
    proxy = tcpproxy.Proxy(tls_files.ca_file)
    with contextlib.ExitStack() as stack:
        stack.enter_context(proxy.running())

        def replica(name: str) -> tuple[processes.Pid1, tcpproxy.Backend]:
            proc, port = stack.enter_context(web(migrated, tls_files, tmp_path, name, workers=1))
            return proc, proxy.add(name, port)

        olds = [replica("old-1"), replica("old-2")]
        for _, backend in olds:
            proxy.wait_until(f"{backend.name} ready", lambda b=backend: b.ready)  # type: ignore[misc]
        load = stack.enter_context(Load(proxy.port, tls_files.ca_file, threads=3).running())
        load.wait_for_more(50)
        news = []
        for n, (old, old_backend) in enumerate(olds):
            new, backend = replica(f"new-{n + 1}")
            news.append(new)
            proxy.wait_until(f"{backend.name} ready", lambda b=backend: b.ready)  # type: ignore[misc]
            load.wait_for_more(20)
            # SIGTERM, as the kubelet sends it once the preStop hook is done.
            code, _ = old.sigterm(within=STOP_BOUND_SECONDS)
            assert code == 0, old.log()
            proxy.remove(old_backend)
        load.wait_for_more(50)
        replies = list(load.replies)
    failed = [r for r in replies if r.is_error]
    print(f"{len(replies)} calls, {len(failed)} failed; proxy refused {proxy.refused}")
    assert not failed, f"{len(failed)} of {len(replies)} calls failed: {failed[:5]}"
    assert proxy.refused == 0
    for proc, backend in olds:
        assert "Draining for" in proc.log(), proc.log()
        assert backend.connections > 0, f"{backend.name} served no connection"
    for proc in [p for p, _ in olds] + news:
        assert "Traceback" not in proc.log() and " ERROR " not in proc.log(), proc.log()
