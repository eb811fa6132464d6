"""A real Celery worker (with embedded beat) for tests, as its own process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from tests.support import servers

#: Test step types (tests/workflows/steps_for_tests.py) are registered in the worker too.
TEST_STEP_MODULES = "tests.workflows.steps_for_tests"


def worker_env(data_dir: Path, kubeconfig: Path | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "hooksvc.settings",
        "DATABASE_URL": servers.test_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "HOOKSVC_DATA_DIR": str(data_dir),
        "HOOKSVC_STEP_MODULES": TEST_STEP_MODULES,
        "PROMETHEUS_MULTIPROC_DIR": str(servers.metrics_dir()),
        # Fast reconciliation so that recovery tests take seconds, not minutes: a killed
        # worker's step is claimed again once its short lease has passed.
        "HOOKSVC_RECONCILE_SECONDS": "1",
        "HOOKSVC_RECONCILE_GRACE_SECONDS": "2",
        "HOOKSVC_STEP_LEASE_SECONDS": "5",
    }
    if kubeconfig is not None:
        # The management cluster (and, through its Secrets, the workload clusters).
        env["HOOKSVC_KUBECONFIG"] = str(kubeconfig)
    return env


def wait_for(predicate: Callable[[], bool], timeout: float = 60, what: str = "it") -> float:
    """Wait until `predicate()` holds, at most `timeout` s; return how long it took."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, f"{what} not reached within {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - start


class Worker:
    """Starts, kills and restarts `celery worker -B` against the test database and Redis."""

    #: Every worker made in this session, so that a test can make sure none is running.
    made: list[Worker] = []

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        env: dict[str, str] | None = None,
        kubeconfig: Path | None = None,
        *,
        concurrency: int = 2,
        pool: str = "prefork",
    ) -> None:
        self.data_dir = data_dir
        #: Celery's pool: `prefork` as in the image, `threads` as `make run` starts it.
        self.concurrency = concurrency
        self.pool = pool
        self.log_path = log_path
        self.env = env or {}
        self.kubeconfig = kubeconfig
        self.process: subprocess.Popen[bytes] | None = None
        #: Set while a test stops or kills the worker on purpose (supervisors leave it alone).
        self.stopping = False
        Worker.made.append(self)

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        # Readiness is looked for in what this start writes, not in an earlier start's lines.
        self._log_offset = log.tell()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "hooksvc",
                "worker",
                "-B",
                "-s",
                str(self.data_dir / "celerybeat-schedule"),
                "--concurrency",
                str(self.concurrency),
                "--pool",
                self.pool,
                "-l",
                "INFO",
                "--without-gossip",
                "--without-mingle",
            ],
            cwd=servers.ROOT,
            env={**worker_env(self.data_dir, self.kubeconfig), **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own process group: a SIGKILL takes the pool processes down with it,
            # as when a pod is OOM-killed.
            start_new_session=True,
        )
        log.close()
        self._wait_ready()

    def _wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited: see {self.log_path}")
            if b"ready." in self.log_path.read_bytes()[self._log_offset :]:
                return
            time.sleep(0.1)
        raise RuntimeError(f"worker not ready within {timeout} s: see {self.log_path}")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker and its pool: no warm shutdown, no acknowledgements."""
        if self.process is not None:
            self.stopping = True
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            # The pool processes die with the group, but maybe a moment after the parent.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.killpg(self.process.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.02)
            self.process = None
            self.stopping = False

    def stop(self) -> None:
        self.stopping = True
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None
        self.stopping = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
