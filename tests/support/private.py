"""Private PostgreSQL and Redis servers on free ports, for fault tests that stop and restart them.

The machine's shared services are never touched: each fault test gets its own servers,
its own web and worker processes, and throws them away afterwards.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support import servers


def _pg_binary(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))[-1:]), None
    )
    if not found:
        raise RuntimeError(f"{name} not found: install PostgreSQL's server binaries")
    return found


def _as_postgres_user() -> list[str]:
    # PostgreSQL refuses to run as root; the throwaway cluster belongs to nobody then.
    return ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []


class PrivatePostgres:
    def __init__(self, template: PrivatePostgres | None = None) -> None:
        """A new cluster (initdb), or a copy of `template`'s, which must be stopped: the
        copy of a cluster's directory is that cluster, its databases and rows included."""
        # Outside pytest's private temp tree: the server may run as nobody, who must reach it.
        root = Path(tempfile.mkdtemp(prefix="hooksvc-pg-"))
        self.root = root
        self.data = root / "pg"
        self.port = servers.free_port()
        self.log = root / "pg.log"
        if os.geteuid() == 0:
            shutil.chown(root, "nobody")
        if template is not None:
            subprocess.run(
                [*_as_postgres_user(), "cp", "-a", str(template.data), str(self.data)],
                check=True,
                capture_output=True,
            )
            return
        subprocess.run(
            [
                *_as_postgres_user(),
                _pg_binary("initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
        )

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            [
                *_as_postgres_user(),
                _pg_binary("pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                *args,
            ],
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-o", options, "-w", "start")

    def stop(self) -> None:
        """A fast shutdown: open connections are cut, as in a failover."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._ctl("-m", "fast", "-w", "stop")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    def __init__(self, root: Path) -> None:
        self.port = servers.free_port()
        self.root = root
        self.process: subprocess.Popen[bytes] | None = None
        root.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start with nothing in memory: a restart of a Redis that keeps nothing on disk."""
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return
            time.sleep(0.05)
        raise RuntimeError("private redis did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
