"""A TCP load balancer for tests: the Service in front of web replicas.

As kube-proxy does, it picks a backend for each new connection among the ready ones and then
only moves bytes: a connection stays with its backend until either side closes it, even
after that backend stops being ready. Readiness is probed as the kubelet probes it: GET
/readyz over HTTPS on a new connection every `probe_seconds`, ready while the last probe
answered 200. A connection that finds no ready backend, or whose backend refuses it, is
closed at once: the client sees its call refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import itertools
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

#: How long a probe or a backend's connect may take.
_CONNECT_SECONDS = 2.0


@dataclasses.dataclass(eq=False)
class Backend:
    name: str
    port: int
    ready: bool = False
    #: Taken out of the Service (the pod is gone): no probe, no new connection.
    removed: bool = False
    #: Connections the proxy sent it.
    connections: int = 0


class Proxy:
    """Listens on 127.0.0.1:`port`; start with `running()`."""

    def __init__(self, ca_file: Path, *, probe_seconds: float = 0.2) -> None:
        self._context = ssl.create_default_context(cafile=str(ca_file))
        self._probe_seconds = probe_seconds
        self._lock = threading.Lock()
        self._backends: list[Backend] = []
        self._turn = itertools.count()
        self._stopping = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port: int = self._listener.getsockname()[1]
        #: Connections closed because no backend was ready or it refused them.
        self.refused = 0

    def add(self, name: str, port: int) -> Backend:
        """A new backend, not ready until a probe says so."""
        backend = Backend(name, port)
        with self._lock:
            self._backends.append(backend)
        return backend

    def remove(self, backend: Backend) -> None:
        backend.removed = True
        backend.ready = False

    def wait_until(self, what: str, condition: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout} s")
            time.sleep(0.05)

    @contextlib.contextmanager
    def running(self) -> Iterator[Proxy]:
        threads = [
            threading.Thread(target=self._accept, name="proxy-accept", daemon=True),
            threading.Thread(target=self._probe, name="proxy-probe", daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            yield self
        finally:
            self._stopping.set()
            # shutdown wakes the thread blocked in accept (close alone does not, on Linux).
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            with self._lock:
                open_sockets = list(self._sockets)
            for sock in open_sockets:
                # Wakes the pumps blocked reading it; they close it.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            for thread in threads:
                thread.join(timeout=10)

    def _probe(self) -> None:
        while not self._stopping.wait(self._probe_seconds):
            with self._lock:
                backends = [b for b in self._backends if not b.removed]
            for backend in backends:
                ready = self._ready(backend.port)
                if not backend.removed:
                    backend.ready = ready

    def _ready(self, port: int) -> bool:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", port, context=self._context, timeout=_CONNECT_SECONDS
        )
        try:
            conn.request("GET", "/readyz")
            answer = conn.getresponse()
            answer.read()
            return answer.status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def _pick(self) -> Backend | None:
        with self._lock:
            ready = [b for b in self._backends if b.ready and not b.removed]
            if not ready:
                return None
            backend = ready[next(self._turn) % len(ready)]
            backend.connections += 1
            return backend

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            backend = self._pick()
            upstream = None
            if backend is not None:
                with contextlib.suppress(OSError):
                    upstream = socket.create_connection(
                        ("127.0.0.1", backend.port), timeout=_CONNECT_SECONDS
                    )
            if upstream is None:
                self.refused += 1
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            pair = _Pair(client, upstream, self._forget)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=pair.pump, args=(source, sink), name="proxy-pump", daemon=True
                ).start()

    def _forget(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._sockets.difference_update(sockets)


class _Pair:
    """One client connection and its backend connection, moving bytes both ways."""

    def __init__(
        self, client: socket.socket, upstream: socket.socket, forget: Callable[..., None]
    ) -> None:
        self._client, self._upstream = client, upstream
        self._forget = forget
        self._lock = threading.Lock()
        self._open_directions = 2
        self._reset = False

    def pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            # A reset on one side is a reset on the other, as the client would see it
            # without a proxy in between: both close with RST, and the other direction's
            # read wakes up (shutdown of the reading side sends nothing).
            self._reset = True
            for sock in (self._client, self._upstream):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RD)
        else:
            if not self._reset:
                # The end of one direction (FIN) is passed on as such.
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)
        with self._lock:
            self._open_directions -= 1
            done = self._open_directions == 0
        if done:
            for sock in (self._client, self._upstream):
                with contextlib.suppress(OSError):
                    sock.close()
            self._forget(self._client, self._upstream)


_LINGER_ZERO = struct.pack("ii", 1, 0)


def _reset(sock: socket.socket) -> None:
    """Close with RST rather than FIN (SO_LINGER with a zero timeout)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
    with contextlib.suppress(OSError):
        sock.close()
