"""gunicorn configuration of the hook server: HTTPS only, keep-alive, threads.

Run with `gunicorn -c python:hooksvc.serving.gunicorn_conf hooksvc.wsgi`. CAPI's runtime client
keeps connections alive, so the gthread worker (which supports keep-alive) serves it.
"""

from __future__ import annotations

import math
import os
from typing import Any

from hooksvc.serving import drain, tls

_tls_dir = tls.tls_dir()

bind = [os.environ.get("HOOKSVC_BIND", "0.0.0.0:9443")]
if os.environ.get("HOOKSVC_ADMIN_PORT"):
    # The admin listener: its own port (hooksvc/serving/middleware.py), never asking for a
    # client certificate (hooksvc/serving/tls.py).
    bind.append(f"{bind[0].rsplit(':', 1)[0]}:{os.environ['HOOKSVC_ADMIN_PORT']}")
# gthread with a deadline per request (serving/gunicorn_worker.py): slow clients are cut off.
worker_class = "hooksvc.serving.gunicorn_worker.BoundedThreadWorker"
workers = int(os.environ.get("HOOKSVC_WEB_WORKERS", "2"))
threads = int(os.environ.get("HOOKSVC_WEB_THREADS", "8"))
# Go's HTTP client drops idle connections after 90 s; keep ours open nearly as long.
keepalive = 75
# A hook call answers in milliseconds; anything near CAPI's 30 s ceiling is stuck.
timeout = 30
#: How long the master waits after SIGTERM before it kills its workers: their drain
#: (serving/gunicorn_worker.py, HOOKSVC_WEB_DRAIN_SECONDS), then 20 s for the calls in flight.
graceful_timeout = math.ceil(drain.SECONDS) + 20
# certfile and keyfile switch gunicorn to TLS; the worker takes each listener's context
# from tls.listeners() (serving/gunicorn_worker.py).
certfile = str(_tls_dir / "tls.crt")
keyfile = str(_tls_dir / "tls.key")
accesslog = None
proc_name = "hooksvc-web"
# gunicorn 25.1+ opens a control socket for `gunicornc` under $XDG_RUNTIME_DIR or
# ~/.gunicorn by default; the container runs with a read-only root filesystem and nobody
# uses gunicornc there (Kubernetes signals the process), so turn it off.
control_socket_disable = True
# Load Django in the master: a bad configuration stops the server before it listens,
# and workers fork with the app already imported.
preload_app = True


def on_starting(server: Any) -> None:
    """Before the workers fork: drop metric files of processes from an earlier start, and
    read the certificates (a missing client CA stops the server here, not at a call)."""
    from hooksvc import multiproc

    multiproc.wipe_stale(multiproc.configure())
    tls.listeners()


def post_worker_init(worker: Any) -> None:
    """In each worker, once forked: read how late the engine is once a second, for the
    hook answers (workflows.hookpath.backlog)."""
    from workflows.hookpath import backlog

    backlog.start()


def worker_exit(server: Any, worker: Any) -> None:
    """In the exiting worker: write the hook call records it still buffers."""
    from workflows.hookpath import hookcalls

    hookcalls.flush()


def child_exit(server: Any, worker: Any) -> None:
    """A worker is gone: its live gauges must not be reported any more (counters stay)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def ssl_context(conf: Any, default_ssl_context_factory: Any) -> Any:
    """gunicorn's own hook, for whatever wraps a socket without knowing its listener: the
    hook port's context, the stricter one."""
    return tls.listeners().for_port(None)
