"""A hooksvc of its own (PostgreSQL, Redis, gunicorn, Celery workers) for fault and soak tests.

Each part can be stopped, killed and restarted; the machine's shared services are never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg

from tests.support import capi, private, servers
from tests.support.worker import TEST_STEP_MODULES, Worker

HOOK = "BeforeClusterUpgrade"


class Stack:
    """PostgreSQL, Redis, gunicorn and Celery workers of one test, each one breakable."""

    def __init__(
        self,
        root: Path,
        tls: servers.TLSFiles,
        workers: int = 1,
        *,
        migrated: private.PrivatePostgres | None = None,
    ) -> None:
        """`migrated`: a stopped cluster with hooksvc's schema (`migrated_postgres`), whose
        copy this stack's PostgreSQL is; without it, a new cluster that `migrate` fills."""
        self.root = root
        self.tls = tls
        self.pg = private.PrivatePostgres(template=migrated)
        self.redis = private.PrivateRedis(root / "redis")
        self.pg.start()
        self.redis.start()
        self.port = servers.free_port()
        self.env = servers.server_env(
            tls.server_dir,
            self.port,
            {
                "DATABASE_URL": self.pg.url,
                "CELERY_BROKER_URL": self.redis.url,
                "HOOKSVC_STEP_MODULES": TEST_STEP_MODULES,
                "HOOKSVC_DATA_DIR": str(root / "data"),
            },
        )
        if migrated is None:
            self.manage("migrate", "--noinput")
        self.web: subprocess.Popen[bytes] | None = None
        self.start_web()
        self.workers = [
            Worker(
                root / f"worker{i}",
                root / f"worker{i}.log",
                env={"DATABASE_URL": self.pg.url, "CELERY_BROKER_URL": self.redis.url},
            )
            for i in range(workers)
        ]
        for worker in self.workers:
            worker.start()
        self.worker_restarts = 0
        self._supervising = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)
        self._supervisor.start()

    @staticmethod
    def migrated_postgres(root: Path, tls: servers.TLSFiles) -> private.PrivatePostgres:
        """A PostgreSQL cluster migrated by `manage.py migrate`, stopped, for stacks to copy
        (`migrated`): initdb and migrate once rather than for each stack."""
        pg = private.PrivatePostgres()
        pg.start()
        env = servers.server_env(
            tls.server_dir,
            servers.free_port(),
            {
                "DATABASE_URL": pg.url,
                "HOOKSVC_STEP_MODULES": TEST_STEP_MODULES,
                "HOOKSVC_DATA_DIR": str(root / "data"),
            },
        )
        result = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput"],
            cwd=servers.ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        pg.stop()
        return pg

    def _supervise(self) -> None:
        """Restart a worker that exits by itself, as Kubernetes (restartPolicy: Always) does.

        Celery 5.7.0's worker exits when Redis restarts under it (kombu raises an
        AttributeError while restoring unacknowledged messages on the dead connection);
        in production its Deployment restarts it. Workers a test kills on purpose are
        restarted by the test.
        """
        while not self._supervising.wait(0.5):
            for worker in self.workers:
                process = worker.process
                if process is not None and process.poll() is not None and not worker.stopping:
                    self.worker_restarts += 1
                    worker.start()

    def manage(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=servers.ROOT,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def start_web(self) -> None:
        self.web = servers.start_gunicorn(self.env, self.root / "web.log")
        servers.wait_for_port("127.0.0.1", self.port, self.web)

    def kill_web(self) -> None:
        assert self.web is not None
        os.killpg(self.web.pid, signal.SIGKILL)
        self.web.wait()

    @property
    def server(self) -> servers.HookServer:
        assert self.web is not None
        return servers.HookServer(
            "127.0.0.1", self.port, self.tls.server_dir / "ca.crt", self.web, self.root / "web.log"
        )

    def apply(self, steps: list[dict[str, Any]], *, name: str = "backup", hook: str = HOOK) -> None:
        document = {
            "apiVersion": "hooksvc/v1alpha1",
            "kind": "WorkflowTemplate",
            "metadata": {"name": name},
            "spec": {"hook": hook, "retryAfterSeconds": 1, "steps": steps},
        }
        self.manage("apply_workflows", "-f", "-", stdin=json.dumps(document))

    def call(self, cluster: str, hook: str = HOOK, **fields: Any) -> tuple[int, dict[str, Any]]:
        cluster_object = capi.cluster_v1beta2(name=cluster, uid=f"uid-{cluster}")
        return self.server.post(
            capi.hook_path(hook), capi.hook_request(hook, cluster_object, **fields)
        )

    def runs(self) -> dict[str, str]:
        """cluster name -> run state, read straight from PostgreSQL."""
        with psycopg.connect(self.pg.url, connect_timeout=2) as conn:
            rows = conn.execute("SELECT cluster_name, state FROM workflows_run").fetchall()
        return dict(rows)

    def close(self) -> None:
        """Throw the stack away. Its processes are killed, not stopped: a warm shutdown took
        10-15 s a stack under load, and nothing of the stack is looked at after it."""
        self._supervising.set()
        self._supervisor.join()
        for worker in self.workers:
            if worker.process is not None:
                with contextlib.suppress(ProcessLookupError):  # it had exited by itself
                    worker.kill()
        if self.web is not None and self.web.poll() is None:
            self.kill_web()
        self.redis.stop()
        self.pg.remove()
