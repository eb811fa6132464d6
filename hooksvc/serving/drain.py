"""A web process's drain: from SIGTERM on, /readyz fails while the process still serves.

The gunicorn worker (serving/gunicorn_worker.py) begins the drain when SIGTERM reaches it;
the readiness probe (serving/health.py) of the same process reads it. Each process has its
own flag: gunicorn forks its workers before any of them drains.
"""

from __future__ import annotations

import os
import threading


def _drain_seconds() -> float:
    raw = os.environ.get("HOOKSVC_WEB_DRAIN_SECONDS", "5")
    try:
        value = float(raw)
    except ValueError:
        raise RuntimeError(f"HOOKSVC_WEB_DRAIN_SECONDS must be a number, got {raw!r}") from None
    if not 0 <= value <= 60:
        raise RuntimeError(f"HOOKSVC_WEB_DRAIN_SECONDS must be between 0 and 60, got {raw!r}")
    return value


#: How long a web process keeps accepting and answering after SIGTERM, with /readyz failing
#: and every answer closing its connection, before gunicorn's own graceful stop.
SECONDS = _drain_seconds()

_draining = threading.Event()


def begin() -> None:
    _draining.set()


def draining() -> bool:
    return _draining.is_set()
