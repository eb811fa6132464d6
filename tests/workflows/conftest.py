"""Fixtures for engine tests: a real Celery worker and a local HTTP receiver."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings

from tests.support.kube import KubeEmulator
from tests.support.worker import Worker


@pytest.fixture(scope="session")
def _worker_process(
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: Any,
    django_db_blocker: Any,
    kube_server: KubeEmulator,
) -> Iterator[Worker]:
    # Messages left by earlier runs of the suite refer to rows that no longer exist.
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    root = tmp_path_factory.mktemp("worker")
    # The emulator is the worker's management cluster (tests reset it with `kube`).
    kubeconfig = root / "kubeconfig"
    kube_server.kubeconfig(kubeconfig)
    worker = Worker(root / "data", root / "worker.log", kubeconfig)
    worker.start()
    yield worker
    worker.stop()


@pytest.fixture
def worker(_worker_process: Worker) -> Worker:
    """The running worker (restarted if a test killed it)."""
    if not _worker_process.alive:
        _worker_process.start()
    return _worker_process


@pytest.fixture
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


class Receiver(http.server.ThreadingHTTPServer):
    """An HTTP endpoint for `http` steps: answers `status`, records what it received."""

    status = 200
    received: list[dict[str, Any]]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.received.append({"headers": dict(self.headers), "body": body})
        self.send_response(self.server.status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver(("127.0.0.1", 0), _Handler)
    server.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
