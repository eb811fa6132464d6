"""Running hooksvc's processes the way the image runs them, for the deployment tests.

`docker-entrypoint.sh` picks the process; here it runs from the checkout with the virtualenv
first on PATH, as PID 1 of its own PID namespace (`unshare --pid --fork --mount-proc`, the
stand-in for a container of /work/shared/notes/containers.md), against a database of its own
on the test PostgreSQL and the test Redis.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psycopg
from django.conf import settings
from psycopg import sql

from hooksvc.serving import drain
from tests.support import servers

ENTRYPOINT = servers.ROOT / "docker-entrypoint.sh"
#: How long a process may take to stop after SIGTERM (ARCHITECTURE invariant 9; Kubernetes
#: and podman then SIGKILL after their grace period).
STOP_SECONDS = 5.0
#: A web process first drains (hooksvc/serving/gunicorn_worker.py): it stops within its
#: drain and the same 5 s.
WEB_STOP_SECONDS = drain.SECONDS + STOP_SECONDS


def _admin_connection() -> psycopg.Connection[tuple[object, ...]]:
    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname="postgres", autocommit=True
    )


_DROP = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")


@contextlib.contextmanager
def fresh_database(suffix: str) -> Iterator[str]:
    """An empty database of its own (named after HOOKSVC_TEST_DB_NAME); its DATABASE_URL."""
    db = settings.DATABASES["default"]
    name = f"{db['NAME']}_{suffix}"
    with _admin_connection() as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}"
    finally:
        with _admin_connection() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextlib.contextmanager
def migrated_database(suffix: str) -> Iterator[str]:
    """fresh_database, migrated by this checkout's `manage.py migrate`."""
    with fresh_database(suffix) as url:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=servers.ROOT,
            env=production_env(database_url=url, data_dir=Path("/nonexistent")),
            check=True,
            timeout=300,
        )
        yield url


def applied_migrations(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        exists = conn.execute("SELECT to_regclass('django_migrations') IS NOT NULL").fetchone()
        if not (exists and exists[0]):
            return 0
        row = conn.execute("SELECT count(*) FROM django_migrations").fetchone()
        return int(row[0]) if row else 0


def production_env(
    *, database_url: str, data_dir: Path, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What k8s/base gives every hooksvc container, pointed at the test services."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HOOKSVC_", "KUBERNETES_", "PROMETHEUS_", "DJANGO_"))
    }
    env.update(
        {
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOOKSVC_ENV": "production",
            "HOOKSVC_SECRET_KEY": secrets.token_urlsafe(50),
            "HOOKSVC_LOG_FORMAT": "text",
            "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "HOOKSVC_DATA_DIR": str(data_dir),
            "PROMETHEUS_MULTIPROC_DIR": str(data_dir / "prometheus"),
            **(extra or {}),
        }
    )
    return env


def unshare_works() -> str:
    """Why processes cannot be run as PID 1 here, or "" when they can."""
    exe = shutil.which("unshare")
    if exe is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(
        [exe, "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        return f"unshare --pid --fork --mount-proc is not allowed here: {probe.stderr.strip()}"
    return ""


@dataclasses.dataclass
class Pid1:
    """A command running as PID 1 of a new PID namespace, and what it printed."""

    outer: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def label(self) -> str:
        """What runs: the entrypoint's process name, or the command."""
        args = self.outer.args
        assert isinstance(args, list)
        command = [str(a) for a in args[4:]]  # after unshare's options
        if str(ENTRYPOINT) in command:
            return command[command.index(str(ENTRYPOINT)) + 1]
        return " ".join(command)[:60]

    def inner(self) -> int:
        """The namespace's init, by its PID as the host sees it (unshare's only child)."""
        children = Path(f"/proc/{self.outer.pid}/task/{self.outer.pid}/children")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError):
                found = children.read_text().split()
                if found:
                    return int(found[0])
            time.sleep(0.02)
        raise AssertionError(f"unshare started no child:\n{self.log()}")

    def wait_for(self, what: str, ready: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.outer.poll() is not None:
                raise AssertionError(
                    f"exited with {self.outer.returncode} before {what}:\n{self.log()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not within {timeout} s:\n{self.log()}")
            time.sleep(0.1)

    def wait_for_line(self, text: str, timeout: float = 60) -> None:
        self.wait_for(repr(text), lambda: text in self.log(), timeout)

    def send(self, signum: int) -> None:
        """Send `signum` to the namespace's init from outside, and return at once."""
        inner = self.inner()
        assert self.outer.poll() is None, f"already ended:\n{self.log()}"
        os.kill(inner, signum)

    def sigterm(self, within: float = STOP_SECONDS) -> tuple[int, float]:
        """SIGTERM the namespace's init from outside, as a container runtime does.

        Returns its exit status and how long it took to stop; fails if it is still running
        after `within` seconds.
        """
        sent = time.monotonic()
        self.send(signal.SIGTERM)
        try:
            code = self.outer.wait(timeout=within)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running {within} s after SIGTERM as PID 1:\n{self.log()}"
            ) from None
        return code, time.monotonic() - sent

    def kill(self) -> None:
        if self.outer.poll() is None:
            with contextlib.suppress(ProcessLookupError, AssertionError):
                # SIGKILL reaches a namespace's init from an ancestor namespace.
                os.kill(self.inner(), signal.SIGKILL)
            self.outer.wait(timeout=30)


@contextlib.contextmanager
def as_pid1(command: list[str], env: Mapping[str, str], log_path: Path) -> Iterator[Pid1]:
    """Run `command` from the checkout as PID 1 of its own PID namespace."""
    with log_path.open("ab") as log:
        outer = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", *command],
            cwd=servers.ROOT,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    running = Pid1(outer, log_path)
    try:
        yield running
    finally:
        running.kill()


class Child(Pid1):
    """A command running as an ordinary child of the test, not as an init."""

    def inner(self) -> int:
        return self.outer.pid

    def label(self) -> str:
        args = self.outer.args
        assert isinstance(args, list)
        return " ".join(str(a) for a in args)[-60:]


@contextlib.contextmanager
def as_child(command: list[str], env: Mapping[str, str], log_path: Path) -> Iterator[Pid1]:
    """Run `command` from the checkout as an ordinary process (PID 1's rules do not apply)."""
    with log_path.open("ab") as log:
        outer = subprocess.Popen(
            command,
            cwd=servers.ROOT,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    running = Child(outer, log_path)
    try:
        yield running
    finally:
        running.kill()


def entrypoint(process: str, *args: str) -> list[str]:
    return ["/bin/sh", str(ENTRYPOINT), process, *args]


#: What a process makes of the sign-in settings it was started with (hooksvc.settings reads
#: them at import; the admin's AppConfig.ready reads the role rules, or stops the process).
_SIGN_IN = """
import json
from django.conf import settings
from workflows.operators import roles
print(json.dumps({
    "issuer": settings.OIDC_ISSUER,
    "client_id": settings.OIDC_CLIENT_ID,
    "client_secret": settings.OIDC_CLIENT_SECRET,
    "scopes": settings.OIDC_SCOPES,
    "groups_claim": settings.OIDC_GROUPS_CLAIM,
    "ca_file": settings.OIDC_CA_FILE,
    "local_login": settings.LOCAL_LOGIN,
    "rules": [
        [r.group, list(r.roles), sorted(r.namespaces) if r.namespaces is not None else None]
        for r in roles.current()
    ],
}))
"""
SIGN_IN_PREFIXES = ("HOOKSVC_OIDC_", "HOOKSVC_LOCAL_LOGIN", "HOOKSVC_ROLES_FILE")


def sign_in_settings(env: Mapping[str, str]) -> dict[str, object]:
    """The sign-in settings and role rules of a process started with the sign-in variables
    of `env` (the rest are the tests'), in a process of its own; AssertionError with its
    stderr when the settings stop it."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(SIGN_IN_PREFIXES)}
    given = {k: v for k, v in env.items() if k.startswith(SIGN_IN_PREFIXES)}
    proc = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", _SIGN_IN],
        cwd=servers.ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "tests.settings", **given},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    found: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return found
