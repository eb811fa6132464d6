"""gunicorn's gthread worker, made so that slow clients cannot delay CAPI's calls.

gthread (gunicorn 27, gunicorn/workers/gthread.py) hands every accepted connection to a
thread at once (`accept` -> `enqueue_req`); the thread waits up to 5 s for a first byte
(`DEFAULT_WORKER_DATA_TIMEOUT`), then does the TLS handshake and reads the request head and
body with blocking reads and no timeout (`TConn.init`, `next(conn.parser)`). A kept-alive
connection that becomes readable goes to a thread the same way (`on_client_socket_readable`).
So 50 clients sending a header line every 3 s held all 16 threads of the hook port, and real
hook calls waited 19-20 s, past CAPI's 10 s call timeout. gunicorn's sync worker is worse (one
request at a time per process); its async workers (gevent, eventlet) or an asyncio server
(uvicorn) read in an event loop and would need another stack.

Here the worker's own event loop (the poller gthread already runs in its main thread) does
the TLS handshake and reads the request head, and a body of up to BUFFERED_BODY_BYTES, with
non-blocking calls; a connection gets a thread only once its request is there, so a hook
call never waits behind a slow client. A connection that has not sent its request within
HOOKSVC_REQUEST_HEAD_SECONDS (default 5) of being accepted (or of becoming readable again
after a keep-alive wait) is closed. What still runs in a thread (the answer, a body larger
than BUFFERED_BODY_BYTES or chunked) is bounded by HOOKSVC_REQUEST_DEADLINE_SECONDS
(default 30): a watchdog shuts the socket down.

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
import errno
import os
import selectors
import signal
import socket
import ssl
import threading
import time
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn.workers.gthread import ThreadWorker

from hooksvc.serving import drain, tls

REQUEST_DEADLINE_SECONDS = float(os.environ.get("HOOKSVC_REQUEST_DEADLINE_SECONDS", "30"))
REQUEST_HEAD_SECONDS = float(os.environ.get("HOOKSVC_REQUEST_HEAD_SECONDS", "5"))
#: A body up to this size is read before a thread is given (a CAPI hook request is a few
#: kB); a larger one is read by the thread, under the request deadline.
BUFFERED_BODY_BYTES = 1 << 20
#: A request head larger than this is handed on as it is: gunicorn's parser refuses it.
_HEAD_BYTES = 64 * 1024
_END_OF_HEAD = b"\r\n\r\n"


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


def _complete(data: bytes) -> bool:
    """Whether `data` holds a whole request head, and its body when that is short."""
    end = data.find(_END_OF_HEAD)
    if end < 0:
        return len(data) > _HEAD_BYTES
    length = 0
    for line in data[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                return True  # the parser refuses it
    if length > BUFFERED_BODY_BYTES:
        return True
    return len(data) >= end + len(_END_OF_HEAD) + length


class _Reading:
    """A connection whose request is being read in the event loop."""

    def __init__(self, conn: Any, deadline: float) -> None:
        self.conn = conn
        self.deadline = deadline
        self.handshaken = conn.parser is not None or not conn.cfg.is_ssl
        self.data = b""


class BoundedThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gthread that reads each request in its event loop before a thread takes it, each
    thread's work bounded by REQUEST_DEADLINE_SECONDS, drained on SIGTERM."""

    watchdog = _Watchdog()
    _drain_timer: threading.Timer | None = None
    wsgi: Any

    def init_process(self) -> None:
        self._reading: dict[int, _Reading] = {}
        super().init_process()

    def accept(self, listener: Any) -> None:
        try:
            client, address = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        server = listener.getsockname()
        conn = self._conn(client, address, server)
        if self.cfg.is_ssl:
            try:
                # The listener's own context: the hook port may ask for a client
                # certificate where the admin port must not (serving/tls.py).
                context = tls.listeners().for_port(server[1])
                conn.sock = context.wrap_socket(
                    conn.sock,
                    server_side=True,
                    suppress_ragged_eofs=self.cfg.suppress_ragged_eofs,
                    do_handshake_on_connect=False,
                )
            except OSError:
                self._drop(conn)
                return
        self._read(conn)

    def _conn(self, client: Any, address: Any, server: Any) -> Any:
        from gunicorn.workers.gthread import TConn

        return TConn(self.cfg, client, address, server)  # non-blocking from here

    def on_client_socket_readable(self, conn: Any, client: Any) -> None:
        """A kept-alive connection's next request: read in the event loop too."""
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self._read(conn)

    def _read(self, conn: Any) -> None:
        reading = _Reading(conn, time.monotonic() + REQUEST_HEAD_SECONDS)
        self._reading[id(conn)] = reading
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._progress, reading))

    def _progress(self, reading: _Reading, _sock: Any = None) -> None:
        conn = reading.conn
        try:
            if not reading.handshaken:
                conn.sock.do_handshake()
                reading.handshaken = True
            while True:
                chunk = conn.sock.recv(65536)
                if not chunk:
                    self._forget(reading)
                    self._drop(conn)
                    return
                reading.data += chunk
                if _complete(reading.data):
                    break
        except (ssl.SSLWantReadError, BlockingIOError):
            return  # more to come: the poller calls again
        except (ssl.SSLWantWriteError, InterruptedError):
            return
        except OSError:
            self._forget(reading)
            self._drop(conn)
            return
        self._forget(reading)
        if conn.parser is None:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader.unread(reading.data)
        conn.initialized = conn.data_ready = True
        self.enqueue_req(conn)

    def _forget(self, reading: _Reading) -> None:
        self._reading.pop(id(reading.conn), None)
        with contextlib.suppress(OSError, KeyError, ValueError):
            self.poller.unregister(reading.conn.sock)

    def _drop(self, conn: Any) -> None:
        self.nr_conns -= 1
        with contextlib.suppress(OSError):
            conn.close()

    def murder_pending(self) -> None:
        """gthread's pending connections, and requests not read within their bound."""
        super().murder_pending()
        now = time.monotonic()
        for reading in [r for r in self._reading.values() if r.deadline < now]:
            self._forget(reading)
            self._drop(reading.conn)

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
