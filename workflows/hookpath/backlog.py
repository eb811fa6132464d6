"""How late the engine is as a whole, read by each web process once a second.

A hook call answers from it (workflows.hookpath.retry.engine_behind): while the engine's
oldest due work is late, CAPI is asked to come back later and no call is held. It is read by
a thread of each gunicorn worker (started by hooksvc.serving.gunicorn_conf.post_worker_init)
rather than in the hook's one query: under a backlog its index scan passes over the steps
that batches hold, and cost 0.7-9 ms a call (queries.sql `engine_late`). A figure up to a second
old is enough to tell a backlog. Where the thread does not run (Django's test client, a
shell), or while PostgreSQL does not answer, it is 0: not behind.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from django.db import DatabaseError, close_old_connections

from workflows import clock
from workflows.engine import sql

logger = logging.getLogger(__name__)

#: How often a web process reads the figure.
REFRESH_SECONDS = 1.0

_late = 0.0
_reader_pid: int | None = None
_lock = threading.Lock()


def late() -> float:
    """How late (seconds) the engine's oldest due work was at the last read; 0 if none."""
    return _late


def read() -> float:
    """Read the figure now, and keep it for `late`."""
    global _late
    [row] = sql.named("engine_late", {"now": clock.now()})
    _late = max(0.0, float(row["late"] or 0.0))
    return _late


def start() -> None:
    """Read the figure every REFRESH_SECONDS in a daemon thread of this process (once)."""
    global _reader_pid
    with _lock:
        if _reader_pid == os.getpid():
            return
        _reader_pid = os.getpid()
    threading.Thread(target=_read_forever, name="engine-backlog", daemon=True).start()


def _read_forever() -> None:
    global _late
    while True:
        try:
            read()
        except DatabaseError:
            # Unknown is not behind: hook calls answer as if the engine kept up.
            _late = 0.0
            close_old_connections()
        except Exception:  # the thread must outlive any surprise; the next second retries
            _late = 0.0
            logger.exception("reading the engine's backlog failed", extra={"action": "backlog"})
        time.sleep(REFRESH_SECONDS)
