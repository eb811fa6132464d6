"""What a running `make run` serves with, for the `manage.py` commands run beside it.

`make run` (hooksvc.serving.devserver) records the DATABASE_URL and CELERY_BROKER_URL it was
started with in HOOKSVC_DATA_DIR/make-run.json while it runs; `hooksvc.settings` (development
only) takes each one it is not given from there. So `manage.py workflows retry ...` in another
shell reaches the same database and broker as the server beside it, with nothing exported.
Without either variable the record is empty: the local PostgreSQL and broker are found from
the data directory alone. A record whose `make run` is gone is ignored.

The file may hold a password (a URL's): it is its owner's alone (0600), as the data
directory's secret key is.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

#: The variables recorded: those that say where the database and the broker are.
RECORDED = ("DATABASE_URL", "CELERY_BROKER_URL")
#: What a live `make run`'s command line holds (a recycled PID is not taken for it).
_COMMAND = b"hooksvc.serving.devserver"


def path(data_dir: Path) -> Path:
    return data_dir / "make-run.json"


def write(data_dir: Path, environ: Mapping[str, str], pid: int) -> None:
    """Record the variables of RECORDED that `environ` sets, for `make run` of PID `pid`."""
    values = {name: environ[name] for name in RECORDED if environ.get(name)}
    data_dir.mkdir(parents=True, exist_ok=True)
    partial = path(data_dir).with_suffix(".partial")
    # Made 0600 before anything is written into it; renamed whole, never read half-written.
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"pid": pid, "environment": values}, out)
    partial.replace(path(data_dir))


def clear(data_dir: Path, pid: int) -> None:
    """Remove the record of `make run` `pid` (not a later one's)."""
    if running_pid(data_dir) in (pid, 0):
        with contextlib.suppress(FileNotFoundError):
            path(data_dir).unlink()


def _read(data_dir: Path) -> dict[str, object]:
    try:
        record = json.loads(path(data_dir).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def running_pid(data_dir: Path) -> int:
    """The PID of the `make run` that recorded, if it still runs; else 0."""
    pid = _read(data_dir).get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return 0
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return 0
    except OSError:  # no /proc here: whether the PID lives is all there is to know
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return 0
        except PermissionError:
            return pid
        return pid
    return pid if _COMMAND in command else 0


def environment(data_dir: Path) -> dict[str, str]:
    """The variables a live `make run` on `data_dir` was started with; {} when none runs."""
    if not running_pid(data_dir):
        return {}
    values = _read(data_dir).get("environment")
    if not isinstance(values, dict):
        return {}
    return {k: v for k, v in values.items() if k in RECORDED and isinstance(v, str)}
