"""Shared fixtures: TLS material, the real HTTPS hook server and a real Celery worker."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hypothesis
import pytest
import redis
from django.conf import settings
from django.core.management import CommandError
from django.core.management.commands import flush
from django.db import connection
from django.db.backends.postgresql.operations import DatabaseOperations

from hooksvc import multiproc
from tests.support import servers
from tests.support.worker import Worker
from workflows.engine import calls, leases

if TYPE_CHECKING:
    # Imported by pytest as a plugin (below); importing it here first would stop pytest
    # from rewriting its asserts.
    from tests.support.kube import KubeEmulator


@pytest.fixture(scope="session", autouse=True)
def _fresh_metric_files() -> None:
    """Drop metric files of earlier test sessions, as gunicorn does for its own at start."""
    multiproc.wipe_stale(multiproc.directory())


@pytest.fixture(scope="session", autouse=True)
def _flush_survives_deadlocks() -> Iterator[None]:
    """Transactional tests end with a TRUNCATE of every table. A test worker reconciling at
    that moment can deadlock with it, and PostgreSQL then cancels one of the two: retry
    the flush rather than fail a test that passed."""
    original = flush.Command.handle

    def handle(self: flush.Command, *args: Any, **options: Any) -> None:
        for attempt in range(5):
            try:
                original(self, *args, **options)
                return
            except CommandError as exc:
                if "deadlock detected" not in str(exc.__cause__) or attempt == 4:
                    raise
                time.sleep(0.2)

    flush.Command.handle = handle  # type: ignore[method-assign]
    yield
    flush.Command.handle = original  # type: ignore[method-assign]


@pytest.fixture(scope="session", autouse=True)
def _flush_by_delete() -> Iterator[None]:
    """Transactional tests end by emptying every table (Django's flush), which on PostgreSQL
    is one TRUNCATE of them all: new files for each table and index, 0.2-0.6 s a test on a
    loaded 2-core machine, for the 250-odd transactional tests. A DELETE of the few rows a
    test leaves takes about 0.01 s and leaves the same empty tables: every table locked as
    TRUNCATE locks them, then emptied in the same transaction, the foreign keys (Django makes
    them DEFERRABLE INITIALLY DEFERRED) checked at its end, no sequence reset (nor is there
    one without reset_sequences). The insert and update triggers of workflows_steprun
    (migration 0015) do not fire on a DELETE."""
    original = DatabaseOperations.sql_flush

    def sql_flush(
        self: DatabaseOperations,
        style: Any,
        tables: Sequence[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences or allow_cascade or not tables:
            return original(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        names = [self.quote_name(table) for table in tables]
        # TRUNCATE's lock first: as with it, transactions still writing (a worker, a server)
        # are waited for, and what they committed is deleted too.
        return [
            f"LOCK TABLE {', '.join(names)} IN ACCESS EXCLUSIVE MODE",
            "SET CONSTRAINTS ALL DEFERRED",
            *(f"DELETE FROM {name}" for name in names),  # noqa: S608 (Django's own tables)
        ]

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign,assignment]
    yield
    DatabaseOperations.sql_flush = original  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _step_calls_see_the_tests_transaction(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test wrapped in one transaction (`django_db` without transaction=True) runs step
    calls on its own thread: a step thread's connection would not see the test's rows.
    Transactional tests and real workers run them on step threads, bounded, as in production."""
    marker = request.node.get_closest_marker("django_db")
    if (
        marker is None
        or marker.kwargs.get("transaction")
        or "transactional_db" in getattr(request, "fixturenames", ())
    ):
        return
    monkeypatch.setattr(calls, "on_calling_thread", True)


@pytest.fixture(autouse=True)
def _heartbeat_rests_after_each_test() -> Iterator[None]:
    """The lease heartbeat of a test that claimed stops beating when the test ends. Beating
    on into a test without database access, it logged a RuntimeError with its traceback,
    and Python 3.11 parses source to underline a traceback (ast.parse): beside the main
    thread's own ast.parse, the interpreter's shared AST state raised "AST constructor
    recursion depth mismatch" in that test (CPython gh-106905; seen under load in
    test_upstream_doc and test_lifecycle_home)."""
    yield
    leases.heartbeat.rest()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: Any, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's test database, and before it is dropped: the engine's own threads in
    this process (the lease heartbeat, step threads) keep connections, as in a worker; end
    them, or the drop would find the database in use."""
    yield
    leases.heartbeat.rest()
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


# The Kubernetes API emulator's fixtures (kube_server, kube, kubeconfig_path), and how
# pytest-xdist hands out the files (longest first, tests/support/schedule.py).
pytest_plugins = ["tests.support.kube", "tests.support.schedule"]


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> servers.TLSFiles:
    return servers.make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def hook_server(
    tls_files: servers.TLSFiles,
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: Any,
    django_db_blocker: Any,
) -> Iterator[servers.HookServer]:
    """gunicorn with the production configuration, serving the test database over HTTPS."""
    log = tmp_path_factory.mktemp("logs") / "gunicorn.log"
    # Records written before the answer, so that tests can count them exactly after each
    # call; tests/workflows/test_hook_calls.py starts servers that buffer, as in production.
    env = {"HOOKSVC_HOOK_CALL_FLUSH_SECONDS": "0"}
    with servers.hook_server(tls_files.server_dir, log, extra_env=env) as server:
        yield server


@pytest.fixture(scope="session")
def mtls_server(
    tls_files: servers.TLSFiles,
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: Any,
    django_db_blocker: Any,
) -> Iterator[servers.HookServer]:
    """The hook server requiring client certificates signed by its ca.crt."""
    log = tmp_path_factory.mktemp("logs") / "gunicorn-mtls.log"
    with servers.hook_server(
        tls_files.server_dir, log, extra_env={"HOOKSVC_TLS_CLIENT_AUTH": "1"}
    ) as server:
        yield server


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
    worker = Worker(root / "data", root / "worker.log", kubeconfig=kubeconfig)
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


@pytest.fixture
def no_worker() -> None:
    """No worker consumes the queue or reconciles (`worker` starts it again when asked)."""
    for made in Worker.made:
        made.stop()


@pytest.fixture
def output_dir(request: pytest.FixtureRequest) -> Path:
    """A directory under test-output/ for files a test keeps (screenshots, logs)."""
    path: Path = servers.ROOT / "test-output" / request.node.name
    path.mkdir(parents=True, exist_ok=True)
    return path


# Property-based tests: deterministic in CI (derandomize), no per-example deadline and no
# "input generation is slow" health check on a shared 2-core machine (a loaded one took 32 s
# for one draw: the time says nothing of the test), no example database in the work tree.
hypothesis.settings.register_profile(
    "hooksvc",
    max_examples=200,
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
    derandomize=True,
    database=None,
    print_blob=False,
)
hypothesis.settings.load_profile("hooksvc")
