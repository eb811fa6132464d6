"""Slow clients (slowloris) cannot delay CAPI's calls on the hook port.

50 TLS connections each send a request head a line at a time (one header line a second,
reconnecting when the server closes them, as slowloris does) against gunicorn with the
production configuration; meanwhile real hook calls must each be answered well within CAPI's
10 s call timeout (kubernetes-sigs/cluster-api internal/runtime/client/client.go,
defaultDiscoveryTimeout / the handler's timeoutSeconds default of 10). Before, gthread
(gunicorn/workers/gthread.py) gave each connection a thread as soon as it was accepted and
read its head with blocking reads: the 8 threads were all held and calls waited until the
30 s request deadline freed them. The bound here is 6 s, a generous margin for a loaded
machine: an answered call takes milliseconds.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import capi, servers

pytestmark = pytest.mark.slow

SLOW_CLIENTS = 50
#: Well under CAPI's 10 s call timeout.
ANSWER_WITHIN_SECONDS = 6.0


class Slowloris:
    """SLOW_CLIENTS connections trickling request heads, kept up until `stop`."""

    def __init__(self, server: servers.HookServer) -> None:
        self.server = server
        self.context = server.client_context()
        self.socks: list[ssl.SSLSocket | None] = [None] * SLOW_CLIENTS
        self.stop = threading.Event()
        #: Connections tried (a handshake the server never completes counts: it holds too).
        self.tried = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> ssl.SSLSocket | None:
        self.tried += 1
        raw = socket.create_connection((self.server.host, self.server.port), timeout=5)
        try:
            tls = self.context.wrap_socket(raw, server_hostname="localhost")
            path = capi.hook_path("BeforeClusterCreate").encode()
            tls.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: localhost\r\n")
        except OSError:
            raw.close()
            return None
        return tls

    def _run(self) -> None:
        line = 0
        while not self.stop.is_set():
            for index, sock in enumerate(self.socks):
                if self.stop.is_set():
                    break
                try:
                    if sock is None:
                        self.socks[index] = self._open()
                    else:
                        sock.sendall(f"X-Slow-{line}: a\r\n".encode())
                except OSError:  # closed by the server: connect again
                    with contextlib.suppress(OSError):
                        sock.close()  # type: ignore[union-attr]
                    self.socks[index] = None
            line += 1
            self.stop.wait(1.0)  # the attacker's pace: a header line a second
        for sock in self.socks:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()


@pytest.fixture
def slow_clients(tls_files: servers.TLSFiles, tmp_path: Path) -> Iterator[servers.HookServer]:
    with servers.hook_server(tls_files.server_dir, tmp_path / "gunicorn.log") as server:
        loris = Slowloris(server)
        loris.thread.start()
        try:
            # Every slow client has connected once; a server that holds a thread per
            # connection completes only the first handshakes (each try then waits 5 s).
            deadline = time.monotonic() + 30
            while loris.tried < SLOW_CLIENTS and time.monotonic() < deadline:
                time.sleep(0.1)
            yield server
        finally:
            loris.stop.set()
            loris.thread.join(timeout=60)


@pytest.mark.django_db(transaction=True)
def test_slow_clients_do_not_delay_hook_calls(slow_clients: servers.HookServer) -> None:
    discovery = {"apiVersion": capi.API_VERSION, "kind": "DiscoveryRequest"}
    hook = capi.hook_request("BeforeClusterCreate")
    took = []
    for path, body in [
        (capi.DISCOVERY_PATH, discovery),
        (capi.hook_path("BeforeClusterCreate"), hook),
    ] * 4:
        started = time.monotonic()
        try:
            status, answer = slow_clients.post(path, body)
        except OSError as exc:  # the client's own 30 s timeout: far past CAPI's
            pytest.fail(f"no answer after {time.monotonic() - started:.1f} s: {exc!r}")
        took.append(round(time.monotonic() - started, 2))
        assert status == 200 and answer["status"] == "Success", answer
    assert max(took) < ANSWER_WITHIN_SECONDS, f"answered after {took} s with slow clients connected"
