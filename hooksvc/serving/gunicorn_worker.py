"""gunicorn's gthread worker with a deadline per request and a drain before it stops.

gthread waits a few seconds for a new connection's first byte, but after that it reads the
TLS handshake, headers and body with blocking reads and no timeout: a handful of clients
trickling a byte now and then would hold every thread of the hook port. Here one watchdog
thread per process shuts down any connection whose request (handshake, reading, answer)
has taken longer than HOOKSVC_REQUEST_DEADLINE_SECONDS (default 30: CAPI's longest hook
timeout, past which its client has given up anyway). Idle keep-alive connections wait in
gunicorn's poller, not in a thread, and are not affected.

The drain. gthread on its own (gunicorn 27.0.1, gunicorn/workers/gthread.py) takes SIGTERM
in `ThreadWorker.handle_exit` (alive = False); `run` then stops accepting at once, keeps
its kept-alive connections for STOP_KEEPALIVE_LINGER (2 s) answering a request on one with
"Connection: close", waits for the requests in flight up to `graceful_timeout`, and closes
what is left. Two things are lost that way behind a load balancer: connections it still
sends in the moment after SIGTERM wait in the listen backlog and are reset when the
process exits, and a client's kept-alive connection that stays idle past the 2 s is
closed under a request it may be writing (Go's transport does not retry a POST written on
a reused connection: net/http transport.go, `shouldRetryRequest`). Here SIGTERM first
begins the drain (serving/drain.py) for HOOKSVC_WEB_DRAIN_SECONDS: /readyz fails, the
worker keeps accepting and answering, and every answer begun from then on says
"Connection: close" (gunicorn/http/wsgi.py, `Response.force_close` before its headers go
out; gthread decides keep-alive when a request starts, so one in flight at SIGTERM would
otherwise be answered keep-alive and closed idle 2 s later), so each connection a client
holds ends at its next exchange, by the client's own reading of the answer. Then gthread's
own stop runs as above, with the calls still in flight finished.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

from hooksvc.serving import drain

REQUEST_DEADLINE_SECONDS = float(os.environ.get("HOOKSVC_REQUEST_DEADLINE_SECONDS", "30"))


class _Watchdog:
    """Shuts down the sockets of requests past their deadline; checks twice a second."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deadlines: dict[int, tuple[float, Any]] = {}
        self._thread: threading.Thread | None = None

    def watch(self, conn: Any) -> None:
        with self._lock:
            self._deadlines[id(conn)] = (time.monotonic() + REQUEST_DEADLINE_SECONDS, conn)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="request-deadlines", daemon=True
                )
                self._thread.start()

    def forget(self, conn: Any) -> None:
        with self._lock:
            self._deadlines.pop(id(conn), None)

    def _run(self) -> None:
        while True:
            time.sleep(0.5)
            now = time.monotonic()
            with self._lock:
                late = [conn for deadline, conn in self._deadlines.values() if deadline < now]
                for conn in late:
                    del self._deadlines[id(conn)]
            for conn in late:
                # The thread blocked in a read on this socket wakes with an error and
                # gunicorn closes the connection.
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)


class BoundedThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gthread, each request bounded by REQUEST_DEADLINE_SECONDS, drained on SIGTERM."""

    watchdog = _Watchdog()
    _drain_timer: threading.Timer | None = None
    wsgi: Any

    def handle_exit(self, sig: int, frame: Any) -> None:
        """SIGTERM: drain for drain.SECONDS, then gthread's own graceful stop."""
        if self._drain_timer is not None or not self.alive:
            return
        drain.begin()
        # Both run on the worker's main loop (gthread's own wake-up goes the same way), in
        # this order.
        self.method_queue.defer(self._draining)
        self._drain_timer = threading.Timer(
            drain.SECONDS, self.method_queue.defer, (self._drained,)
        )
        self._drain_timer.daemon = True
        self._drain_timer.start()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.wsgi = _closing_while_draining(self.wsgi)

    def _draining(self) -> None:
        self.log.info("Draining for %g s: readiness fails, answers close", drain.SECONDS)

    def _drained(self) -> None:
        self.log.info("Drained: no new connections; finishing the calls in flight")
        super().handle_exit(signal.SIGTERM, None)

    def handle(self, conn: Any) -> Any:
        self.watchdog.watch(conn)
        try:
            return super().handle(conn)
        finally:
            self.watchdog.forget(conn)


def _closing_while_draining(app: Any) -> Any:
    """`app`, whose answers close their connection once the drain has begun."""

    def closing(environ: Any, start_response: Any) -> Any:
        def start(status: str, headers: Any, exc_info: Any = None) -> Any:
            if drain.draining():
                # gunicorn's start_response is its Response's method (gunicorn/http/wsgi.py).
                start_response.__self__.force_close()
            return start_response(status, headers, exc_info)

        return app(environ, start)

    return closing
