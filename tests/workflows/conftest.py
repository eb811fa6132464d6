"""Fixtures for engine tests: a local HTTP receiver, the engine's messages recorded, its clock
held still (the worker is in tests/conftest.py)."""

from __future__ import annotations

import datetime
import http.server
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.utils import timezone

from tests.workflows.steps_for_tests import PREFIX
from workflows import clock
from workflows.engine import dispatch


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


@pytest.fixture
def sent(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """The messages the engine sends, recorded instead of reaching the broker.

    The test is then the engine: in a transactional test, whose rows are committed, a worker
    left running by an earlier test would advance them too (its reconciler sends a new run at
    once, every second: tests/support/worker.py), so none runs (`no_worker`). Under load the
    worker came first now and then (test_schedule_race, test_step_bounds's inline step)."""
    marker = request.node.get_closest_marker("django_db")
    if (marker is not None and marker.kwargs.get("transaction")) or (
        "transactional_db" in request.fixturenames
    ):
        request.getfixturevalue("no_worker")
    messages: list[tuple[str, Any]] = []

    def record(name: str, args: tuple[Any, ...], countdown: float | None) -> None:
        short = name.removeprefix("workflows.")
        if countdown is not None:
            messages.append((f"{short}_later", args))
        else:
            messages.append((short, args[0] if args else None))

    monkeypatch.setattr(dispatch, "broker", record)
    return messages


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[datetime.datetime]]:
    """The engine's clock, held still; tests move it by replacing the one element."""
    moment = [timezone.now()]
    monkeypatch.setattr(clock, "now", lambda: moment[0])
    yield moment


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], datetime.datetime]:
    """Moves the engine's clock ahead by some seconds (it stands still otherwise)."""
    moment = [clock.now()]
    monkeypatch.setattr(clock, "now", lambda: moment[0])

    def move(seconds: float) -> datetime.datetime:
        moment[0] += datetime.timedelta(seconds=seconds)
        return moment[0]

    return move


@pytest.fixture
def clean_redis(redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """The test step types' records in Redis, empty before and after (others count them)."""
    for key in redis_client.scan_iter(f"{PREFIX}:*"):
        redis_client.delete(key)
    yield redis_client
    for key in redis_client.scan_iter(f"{PREFIX}:*"):
        redis_client.delete(key)
