"""gunicorn configuration of the hook server: HTTPS only, keep-alive, threads.

Run with `gunicorn -c python:hooksvc.serving.gunicorn_conf hooksvc.wsgi`. CAPI's runtime client
keeps connections alive, so the gthread worker (which supports keep-alive) serves it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from hooksvc.serving import drain

_tls_dir = Path(
    os.environ.get("HOOKSVC_TLS_DIR")
    # The checkout's var/, as hooksvc.settings' DATA_DIR (this file is hooksvc/serving/...).
    or Path(os.environ.get("HOOKSVC_DATA_DIR", Path(__file__).resolve().parents[2] / "var")) / "tls"
)
_client_auth = os.environ.get("HOOKSVC_TLS_CLIENT_AUTH", "") == "1"

bind = [os.environ.get("HOOKSVC_BIND", "0.0.0.0:9443")]
if os.environ.get("HOOKSVC_ADMIN_PORT"):
    # The admin listener: same TLS, its own port (see hooksvc/serving/middleware.py).
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
# certfile and keyfile switch gunicorn to TLS; the context itself comes from ssl_context.
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

_contexts: Any = None


def on_starting(server: Any) -> None:
    """Before the workers fork: drop metric files of processes from an earlier start."""
    from hooksvc import multiproc

    multiproc.wipe_stale(multiproc.configure())


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
    """Called by gunicorn for every new connection: hand out the cached, reloading context."""
    global _contexts
    if _contexts is None:
        from hooksvc.serving import tls

        _contexts = tls.ContextCache(_tls_dir, client_auth=_client_auth)
    return _contexts.get()
