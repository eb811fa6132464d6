"""What a running `make run` serves with, for the `manage.py` commands run beside it.

`make run` (hooksvc.serving.devserver) records the settings it was started with (every
variable of hooksvc.environment it was given, but for the secrets and what names the process
itself) in HOOKSVC_DATA_DIR/make-run.json while it runs; `hooksvc.settings` (development only)
takes each one a process is not given from there. So `manage.py workflows list --as ann@...`
in another shell reaches the same database and broker as the server beside it and judges
people by the same provider and role rules, with nothing exported; paths are recorded
absolute, so a shell in another directory reads the same files. Without DATABASE_URL or
CELERY_BROKER_URL the local PostgreSQL and broker are found from the data directory alone.
A record whose `make run` is gone is ignored.

The file may hold a password (a URL's): it is its owner's alone (0600), as the data
directory's secret key is. The secrets themselves (SECRETS) are never recorded: no command
beside `make run` needs them.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from hooksvc.environment import ENVIRONMENT

#: Secrets: what signs sessions, proves the client to the provider, or guards /metrics.
SECRETS = frozenset(
    {
        "HOOKSVC_SECRET_KEY",
        "HOOKSVC_OIDC_CLIENT_SECRET",
        "HOOKSVC_ADMIN_PASSWORD",
        "HOOKSVC_METRICS_TOKEN",
    }
)
#: What finds the record itself, or belongs to one process alone.
_OWN = frozenset({"HOOKSVC_ENV", "HOOKSVC_DATA_DIR", "PROMETHEUS_MULTIPROC_DIR"})
#: The variables recorded: every setting but those. KUBECONFIG is read as kubectl reads it.
RECORDED = tuple(n for n in [*ENVIRONMENT, "KUBECONFIG"] if n not in SECRETS | _OWN)
#: Variables naming files or directories, relative to the directory `make run` started in.
PATHS = frozenset(
    {"HOOKSVC_ROLES_FILE", "HOOKSVC_OIDC_CA_FILE", "HOOKSVC_TLS_DIR", "HOOKSVC_KUBECONFIG"}
)
#: What a live `make run`'s command line holds (a recycled PID is not taken for it).
_COMMAND = b"hooksvc.serving.devserver"


def path(data_dir: Path) -> Path:
    return data_dir / "make-run.json"


def write(data_dir: Path, environ: Mapping[str, str], pid: int) -> None:
    """Record the variables of RECORDED that `environ` sets, for `make run` of PID `pid`."""
    values = {name: _absolute(name, environ[name]) for name in RECORDED if environ.get(name)}
    data_dir.mkdir(parents=True, exist_ok=True)
    partial = path(data_dir).with_suffix(".partial")
    # Made 0600 before anything is written into it; renamed whole, never read half-written.
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"pid": pid, "environment": values}, out)
    partial.replace(path(data_dir))


def _absolute(name: str, value: str) -> str:
    if not value:
        return value
    if name == "KUBECONFIG":  # a list, as kubectl takes it
        return os.pathsep.join(os.path.abspath(p) if p else p for p in value.split(os.pathsep))
    return os.path.abspath(value) if name in PATHS else value


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


def adopt(data_dir: Path, environ: MutableMapping[str, str]) -> dict[str, str]:
    """Set in `environ` each variable a live `make run` on `data_dir` was started with that
    `environ` does not set (one exported, even empty, wins); those it set, by name."""
    taken = {k: v for k, v in environment(data_dir).items() if k not in environ}
    environ.update(taken)
    return taken


def differences(data_dir: Path, environ: Mapping[str, str]) -> list[str]:
    """The recorded variables `environ` sets otherwise than the live `make run` on
    `data_dir` (a secret or an unrecorded one cannot be compared, and is not)."""
    served = environment(data_dir)
    return sorted(n for n, v in served.items() if n in environ and _absolute(n, environ[n]) != v)
