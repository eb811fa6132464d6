"""hooksvc's processes as the benchmarks run them: gunicorn over TLS and a Celery worker.

Both get hooksvc's production configuration (gunicorn_conf, the worker's settings) and the
benchmarks' database and Redis DB; their logs go under var/bench/. CPU and RSS are read
with psutil from the process tree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import psutil

from bench import env
from hooksvc.serving import devcerts


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tls_dir() -> Path:
    """A development CA and serving certificate for 127.0.0.1 (hooksvc.serving.devcerts)."""
    path = env.DATA_DIR / "tls"
    if not (path / "tls.crt").exists():
        ca_cert, ca_key = devcerts.make_ca("hooksvc bench CA")
        cert, key = devcerts.issue(ca_cert, ca_key, "localhost", hosts=devcerts.DEFAULT_HOSTS)
        devcerts.write_serving_files(path, ca_cert, cert, key)
    return path


@dataclasses.dataclass
class Web:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def workers(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children()


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode}; see {log}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"not listening within 60 s; see {log}")


@contextlib.contextmanager
def _serving(port: int, process: subprocess.Popen[bytes], log: Path) -> Iterator[Web]:
    """The server once it listens; terminated (killed after 30 s) on the way out."""
    try:
        _wait_listening(port, process, log)
        yield Web(port, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def web(
    *,
    worker_class: str = "gthread",
    workers: int = 2,
    threads: int = 8,
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[Web]:
    """gunicorn -c python:hooksvc.serving.gunicorn_conf, `worker_class` swapped for comparison."""
    port = free_port()
    log = env.DATA_DIR / f"gunicorn-{worker_class}.log"
    environ = {
        **os.environ,
        **env.process_env(),
        "HOOKSVC_TLS_DIR": str(tls_dir()),
        "HOOKSVC_BIND": f"127.0.0.1:{port}",
        "HOOKSVC_WEB_WORKERS": str(workers),
        "HOOKSVC_WEB_THREADS": str(threads),
        **(extra_env or {}),
    }
    argv = [sys.executable, "-m", "gunicorn", "-c", "python:hooksvc.serving.gunicorn_conf"]
    if worker_class != "gthread":
        argv += ["--worker-class", worker_class]
    with log.open("ab") as out:
        process = subprocess.Popen(
            [*argv, "hooksvc.wsgi"], cwd=env.ROOT, env=environ, stdout=out, stderr=out
        )
    with _serving(port, process, log) as web:
        yield web


@contextlib.contextmanager
def asgi_web(*, workers: int = 2) -> Iterator[Web]:
    """uvicorn serving hooksvc through Django's ASGI handler, same TLS files and processes."""
    port = free_port()
    log = env.DATA_DIR / "uvicorn.log"
    tls = tls_dir()
    environ = {**os.environ, **env.process_env(), "HOOKSVC_TLS_DIR": str(tls)}
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "bench.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--ssl-certfile",
        str(tls / "tls.crt"),
        "--ssl-keyfile",
        str(tls / "tls.key"),
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    with log.open("ab") as out:
        process = subprocess.Popen(argv, cwd=env.ROOT, env=environ, stdout=out, stderr=out)
    with _serving(port, process, log) as web:
        yield web


@dataclasses.dataclass
class Worker:
    process: subprocess.Popen[bytes]

    def tree(self) -> list[psutil.Process]:
        main = psutil.Process(self.process.pid)
        return [main, *main.children(recursive=True)]


@contextlib.contextmanager
def worker(
    *,
    concurrency: int = 2,
    name: str = "worker",
    beat: bool = False,
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[Worker]:
    """`celery -A hooksvc worker` (prefork, `concurrency` processes) with bench.steps loaded.

    `beat` embeds beat (`-B`), which sends the reconciler and the batched polls.
    """
    log = env.DATA_DIR / f"{name}.log"
    log.write_bytes(b"")
    schedule = env.DATA_DIR / f"{name}-celerybeat-schedule"
    schedule.unlink(missing_ok=True)
    beat_args = ["-B", "-s", str(schedule)] if beat else []
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "hooksvc",
                "worker",
                "-I",
                env.STEP_MODULES,
                "--concurrency",
                str(concurrency),
                "-l",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                f"{name}@%h",
                *beat_args,
            ],
            cwd=env.ROOT,
            env={**os.environ, **env.process_env(), **(extra_env or {})},
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while b"ready." not in log.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start; see {log}")
            time.sleep(0.1)
        yield Worker(process)
    finally:
        stop_group(process)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group `process` leads (start_new_session), SIGKILL after 30 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for p in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def rss_mib(process: psutil.Process) -> float:
    return float(process.memory_info().rss) / 2**20
