"""Where every hooksvc process writes its metric samples (prometheus_client's multiprocess mode).

gunicorn workers and Celery's pool processes each count in their own memory-mapped files
under one directory, and /metrics adds them up. prometheus_client decides at import time
whether it runs in that mode, so `configure()` sets PROMETHEUS_MULTIPROC_DIR before it is
imported: `hooksvc.celery`, which every hooksvc process imports first, calls it. Processes
that should be counted together (web and worker in `make run`, the test servers) are given
the same directory through that variable.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

ENV = "PROMETHEUS_MULTIPROC_DIR"
#: prometheus_client names its files <kind>_<pid>.db (live gauges: gauge_live<mode>_<pid>.db).
_FILE_PID = re.compile(r"_(\d+)\.db$")


def directory() -> Path:
    """The configured directory, or `prometheus/` under HOOKSVC_DATA_DIR (in the image, /tmp)."""
    configured = os.environ.get(ENV)
    if configured:
        return Path(configured)
    data_dir = os.environ.get("HOOKSVC_DATA_DIR") or Path(__file__).resolve().parent.parent / "var"
    return Path(data_dir) / "prometheus"


def configure() -> Path:
    """Make the directory and export it, so that this process and its children count into it."""
    path = directory()
    path.mkdir(parents=True, exist_ok=True)
    os.environ[ENV] = str(path)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def wipe_stale(path: Path) -> int:
    """Remove the files of processes that are gone; called when gunicorn's master starts.

    Only dead processes' files go: a worker sharing the directory (`make run`, the tests)
    may already be counting when the web server starts. Returns how many files went.
    """
    removed = 0
    for file in path.glob("*.db"):
        match = _FILE_PID.search(file.name)
        if match and _alive(int(match.group(1))):
            continue
        with contextlib.suppress(FileNotFoundError):
            file.unlink()
            removed += 1
    return removed
