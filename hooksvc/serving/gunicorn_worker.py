"""gunicorn's gthread worker with a deadline per request, so that slow clients are cut off.

gthread waits a few seconds for a new connection's first byte, but after that it reads the
TLS handshake, headers and body with blocking reads and no timeout: a handful of clients
trickling a byte now and then would hold every thread of the hook port. Here one watchdog
thread per process shuts down any connection whose request (handshake, reading, answer)
has taken longer than HOOKSVC_REQUEST_DEADLINE_SECONDS (default 30: CAPI's longest hook
timeout, past which its client has given up anyway). Idle keep-alive connections wait in
gunicorn's poller, not in a thread, and are not affected.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

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
    """gthread, each request bounded by REQUEST_DEADLINE_SECONDS."""

    watchdog = _Watchdog()

    def handle(self, conn: Any) -> Any:
        self.watchdog.watch(conn)
        try:
            return super().handle(conn)
        finally:
            self.watchdog.forget(conn)
