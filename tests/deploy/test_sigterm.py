"""Every process of the image stops within 5 s of SIGTERM as PID 1, as in a container (web
after its drain: tests/deploy/test_web_drain.py).

The kernel delivers to the init of a PID namespace only the signals it has a handler for,
from inside the namespace or from an ancestor; SIGKILL and SIGSTOP from an ancestor are the
exceptions (man7.org pid_namespaces(7), "The namespace init process"). Kubernetes and podman
run the image's entrypoint as that init (`exec` keeps it PID 1), send it SIGTERM and SIGKILL it
when the grace period ends. `unshare --pid --fork --mount-proc` gives the same situation
without a container engine: each test runs `docker-entrypoint.sh PROCESS` from the checkout as
PID 1 and sends SIGTERM from outside, as the runtime does.

Who handles SIGTERM: gunicorn's arbiter (benoitc/gunicorn gunicorn/arbiter.py, `init_signals`
and `handle_term`: a graceful stop of the workers), Celery's worker (celery/celery
celery/apps/worker.py, `install_worker_term_handler`: warm shutdown) and beat
(celery/apps/beat.py, `install_sync_handler`: saves the schedule, then SystemExit);
`hooksvc.pid1` for `manage.py` commands such as `migrate`; `watch_clusters` its own; the
entrypoint's shell a `trap` for its wait-for-migrations loop. The first test shows that the
harness does catch a process that installs no handler.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import psycopg
import pytest

from tests.deploy import processes
from tests.deploy.processes import as_pid1, entrypoint
from tests.support import servers
from tests.support.kube import KubeEmulator

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _pid_namespaces() -> None:
    reason = processes.unshare_works()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def migrated(django_db_setup: object) -> Iterator[str]:
    """A migrated database of the module's own (the processes' DATABASE_URL)."""
    with processes.fresh_database("sigterm") as url:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=servers.ROOT,
            env=processes.production_env(database_url=url, data_dir=Path("/nonexistent")),
            check=True,
            timeout=300,
        )
        yield url


def test_a_pid_1_without_a_handler_ignores_sigterm(tmp_path: Path) -> None:
    """The rule the other tests rely on: without a handler, SIGTERM does nothing to PID 1."""
    env = processes.production_env(database_url="", data_dir=tmp_path)
    sleeper = ["python", "-c", "import time; print('up', flush=True); time.sleep(60)"]
    with as_pid1(sleeper, env, tmp_path / "log") as proc:
        proc.wait_for_line("up")
        init = Path(f"/proc/{proc.inner()}")
        with pytest.raises(AssertionError, match=r"still running 5\.0 s after SIGTERM"):
            proc.sigterm()
        assert init.exists() and proc.outer.poll() is None, "SIGTERM left it running"
        # SIGKILL from outside does end it (kill() waits for unshare, which waits for it).
        proc.kill()
        assert not init.exists(), f"{init} is still there after SIGKILL"


def test_web_stops_on_sigterm_and_exits_0(
    migrated: str, tls_files: servers.TLSFiles, tmp_path: Path
) -> None:
    port = servers.free_port()
    env = processes.production_env(
        database_url=migrated,
        data_dir=tmp_path,
        extra={
            "HOOKSVC_TLS_DIR": str(tls_files.server_dir),
            "HOOKSVC_BIND": f"127.0.0.1:{port}",
            "HOOKSVC_WEB_WORKERS": "2",
            # The drain has its own tests (test_web_drain.py); here, the signal's handling,
            # which is the same with none.
            "HOOKSVC_WEB_DRAIN_SECONDS": "0",
        },
    )
    with as_pid1(entrypoint("web"), env, tmp_path / "log") as proc:
        proc.wait_for_line("Booting worker")
        server = servers.HookServer("127.0.0.1", port, tls_files.ca_file, proc.outer, proc.log_path)
        proc.wait_for("discovery", lambda: _discovery_answers(server))
        code, seconds = proc.sigterm()
        print(f"{proc.label()} stopped {seconds:.1f} s after SIGTERM")
    assert code == 0, proc.log()
    assert "Shutting down: Master" in proc.log()


def _discovery_answers(server: servers.HookServer) -> bool:
    try:
        status, body = server.post(
            "/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery",
            {"apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1", "kind": "DiscoveryRequest"},
        )
    except OSError:
        return False
    return status == 200 and len(body["handlers"]) == 9


def test_the_worker_stops_warmly_on_sigterm(migrated: str, tmp_path: Path) -> None:
    env = processes.production_env(database_url=migrated, data_dir=tmp_path)
    # A queue of its own: the suite's worker and this one do not take each other's tasks.
    command = entrypoint("worker", "-Q", "sigterm-test", "--without-gossip", "--without-mingle")
    with as_pid1(command, env, tmp_path / "log") as proc:
        proc.wait_for_line("ready.")
        code, seconds = proc.sigterm()
        print(f"{proc.label()} stopped {seconds:.1f} s after SIGTERM")
    assert code == 0, proc.log()
    assert "worker: Warm shutdown" in proc.log()


def test_beat_stops_on_sigterm(migrated: str, tmp_path: Path) -> None:
    env = processes.production_env(database_url=migrated, data_dir=tmp_path)
    schedule = tmp_path / "celerybeat-schedule"
    # A later -s wins over the entrypoint's /tmp one: runs of the suite side by side.
    with as_pid1(entrypoint("beat", "-s", str(schedule)), env, tmp_path / "log") as proc:
        # Its scheduler opens the schedule file once it runs (hooksvc keeps beat's own
        # "Starting..." line below INFO).
        proc.wait_for("the schedule file", lambda: any(tmp_path.glob("celerybeat-schedule*")))
        code, seconds = proc.sigterm()
        print(f"{proc.label()} stopped {seconds:.1f} s after SIGTERM")
    assert code == 0, proc.log()


def test_the_cluster_watcher_stops_on_sigterm_in_the_middle_of_a_watch(
    migrated: str, kube: KubeEmulator, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kube.kubeconfig(kubeconfig)
    port = servers.free_port()
    env = processes.production_env(
        database_url=migrated,
        data_dir=tmp_path,
        extra={"HOOKSVC_KUBECONFIG": str(kubeconfig), "HOOKSVC_WATCHER_PORT": str(port)},
    )
    with as_pid1(entrypoint("watch-clusters"), env, tmp_path / "log") as proc:
        # A watch request lasts 60 s: the watcher is blocked reading it when SIGTERM comes.
        proc.wait_for(
            "a watch of Clusters",
            lambda: any("/clusters" in path and "watch=" in path for _, path in kube.requests),
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            assert answer.status == 200
        code, seconds = proc.sigterm()
        print(f"{proc.label()} stopped {seconds:.1f} s after SIGTERM")
    assert code == 0, proc.log()
    assert "Traceback" not in proc.log()
    # It led, and gave the lead up for a standby (outside a Pod the Lease is in `default`).
    lease = kube.get_object("coordination.k8s.io", "v1", "leases", "default", "hooksvc-watcher")
    assert lease is not None and lease["spec"]["holderIdentity"] == "", proc.log()


Start = Callable[[list[str], dict[str, str], Path], AbstractContextManager[processes.Pid1]]


@pytest.mark.parametrize(
    ("start", "signum"),
    [
        (as_pid1, signal.SIGTERM),
        (processes.as_child, signal.SIGTERM),
        (processes.as_child, signal.SIGINT),
    ],
    ids=["pid-1", "child", "child-sigint"],
)
def test_migrate_stops_between_migrations_and_a_rerun_completes(
    start: Start, signum: signal.Signals, tmp_path: Path
) -> None:
    """SIGTERM in the window where a migration's tables are committed and its record is not.

    Django records a migration that left deferred SQL (auth.0001_initial's indexes on
    PostgreSQL) only after the schema editor's transaction commits
    (django/db/migrations/executor.py, `MigrationExecutor.apply_migration`). The test holds
    django_migrations in SHARE mode, which lets migrate read it but not insert: the record
    waits in that window, and SIGTERM comes then. A stop there would leave auth's tables
    unrecorded, and the rerun would fail with `relation "auth_permission" already exists`.
    """
    with processes.fresh_database("sigterm_migrate") as url:
        env = processes.production_env(database_url=url, data_dir=tmp_path)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0", "contenttypes"],
            cwd=servers.ROOT,
            env=env,
            check=True,
            timeout=300,
        )
        with psycopg.connect(url) as holder:
            holder.execute("LOCK TABLE django_migrations IN SHARE MODE")
            with start(
                entrypoint("migrate", "auth", "0001_initial"), env, tmp_path / "log"
            ) as proc:
                proc.wait_for("auth's tables and a waiting record", lambda: _record_waits(url))
                proc.send(signum)
                _wait_until("migrate notes the signal or ends", lambda: _noted_or_ended(proc))
                holder.rollback()
                code = proc.outer.wait(timeout=processes.STOP_SECONDS)
        assert _applied(url, "auth") == ["auth.0001_initial"], proc.log()
        assert code == 128 + signum, proc.log()
        assert f"{signum.name}: stopping once auth.0001_initial is recorded" in proc.log()
        # The rest runs next time.
        with as_pid1(entrypoint("migrate"), env, tmp_path / "log2") as rerun:
            rerun.wait_for("the rerun", lambda: rerun.outer.poll() is not None, timeout=300)
        assert rerun.outer.returncode == 0, rerun.log()
        assert "auth.0002_alter_permission_name_max_length" in _applied(url, "auth")


def test_migrate_stops_at_once_outside_a_migration(tmp_path: Path) -> None:
    """Before its first migration (here blocked reading django_migrations, which the test
    locks), SIGTERM ends migrate as PID 1 at once, as hooksvc.pid1 does for other commands."""
    with processes.fresh_database("sigterm_migrate_early") as url:
        env = processes.production_env(database_url=url, data_dir=tmp_path)
        with psycopg.connect(url) as holder:
            holder.execute("CREATE TABLE django_migrations (id serial PRIMARY KEY, app text)")
            holder.execute("LOCK TABLE django_migrations IN ACCESS EXCLUSIVE MODE")
            with as_pid1(entrypoint("migrate"), env, tmp_path / "log") as proc:
                proc.wait_for("migrate waiting for django_migrations", lambda: _waits(url))
                code, seconds = proc.sigterm()
                print(f"{proc.label()} stopped {seconds:.1f} s after SIGTERM")
        assert code == 128 + 15, proc.log()
        assert "stopping once" not in proc.log()


def _waits(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE '%django_migrations%')"
        ).fetchone()
    return bool(row and row[0])


def _record_waits(url: str) -> bool:
    """auth's tables are committed, and migrate's insert into django_migrations waits."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT to_regclass('auth_permission') IS NOT NULL AND EXISTS ("
            " SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO \"django_migrations\"%')"
        ).fetchone()
    return bool(row and row[0])


def _noted_or_ended(proc: processes.Pid1) -> bool:
    return proc.outer.poll() is not None or ": stopping once" in proc.log()


def _wait_until(what: str, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + processes.STOP_SECONDS
    while not ready():
        assert time.monotonic() < deadline, f"{what}: not within {processes.STOP_SECONDS} s"
        time.sleep(0.05)


def _applied(url: str, app: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT name FROM django_migrations WHERE app = %s", (app,))
        return [f"{app}.{name}" for (name,) in rows.fetchall()]


def test_waiting_for_migrations_stops_on_sigterm_and_ends_once_migrated(
    migrated: str, tmp_path: Path
) -> None:
    with processes.fresh_database("sigterm_wait") as url:
        env = processes.production_env(database_url=url, data_dir=tmp_path)
        with as_pid1(entrypoint("wait-for-migrations"), env, tmp_path / "log") as proc:
            proc.wait_for_line("waiting for the migrate Job: migrations are pending")
            code, seconds = proc.sigterm()
            print(f"{proc.label()} stopped {seconds:.1f} s after SIGTERM")
        assert code == 128 + 15, proc.log()
    env = processes.production_env(database_url=migrated, data_dir=tmp_path)
    with as_pid1(entrypoint("wait-for-migrations"), env, tmp_path / "log-done") as done:
        done.wait_for("the end of the wait", lambda: done.outer.poll() is not None, timeout=120)
    assert done.outer.returncode == 0, done.log()
    assert "waiting for the migrate Job" not in done.log()


def test_a_stop_that_a_finalizer_swallows_still_ends_the_process(tmp_path: Path) -> None:
    """Python drops what a signal handler raises while a `__del__` runs ("Exception ignored
    in"); hooksvc.pid1.leave's timer ends the process all the same."""
    script = (
        "import time\n"
        "import hooksvc\n"  # installs hooksvc.pid1's handler, as in every hooksvc process
        "class Slow:\n"
        "    def __del__(self):\n"
        "        time.sleep(30)\n"
        "print('up', flush=True)\n"
        "while True:\n"
        "    Slow()\n"
    )
    env = processes.production_env(database_url="", data_dir=tmp_path)
    with as_pid1(["python", "-c", script], env, tmp_path / "log") as proc:
        proc.wait_for_line("up")
        code, seconds = proc.sigterm()
        print(f"{proc.label()} stopped {seconds:.1f} s after SIGTERM")
    assert code == 128 + 15
    assert "Exception ignored" in proc.log() and "SystemExit" in proc.log()
