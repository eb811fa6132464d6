"""`make run`: its admin account (created from the environment, or a hint; never a default),
and the whole command on a machine with nothing running: its own PostgreSQL and broker, the
README's five-minute start, a second start on the same data, and stopping on Ctrl-C or SIGTERM;
its broker and worker killed while it serves (the hook keeps answering, both come back, the
work is done, the terminal says so in a line each), from a data directory only root may enter;
and manage.py beside it reaching the broker it was given, with nothing exported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from hooksvc import devdb
from hooksvc.serving import devserver
from tests.deploy import processes
from tests.support import private, servers

PASSWORD = "correct-horse-battery-7"


@pytest.mark.django_db
def test_make_run_creates_the_named_superuser_without_showing_the_password() -> None:
    notice = devserver.ensure_admin(
        {"HOOKSVC_ADMIN_USERNAME": "ops", "HOOKSVC_ADMIN_PASSWORD": PASSWORD}
    )
    user = User.objects.get(username="ops")
    assert user.is_superuser and user.is_staff and user.is_active
    assert user.check_password(PASSWORD)
    assert "Created the admin user 'ops'" in notice
    assert PASSWORD not in notice


@pytest.mark.django_db
def test_make_run_leaves_an_existing_admin_user_as_it_is() -> None:
    User.objects.create_user("ops", password="an-earlier-password-1")
    notice = devserver.ensure_admin(
        {"HOOKSVC_ADMIN_USERNAME": "ops", "HOOKSVC_ADMIN_PASSWORD": PASSWORD}
    )
    user = User.objects.get(username="ops")
    assert user.check_password("an-earlier-password-1") and not user.is_superuser
    assert notice == "Admin user 'ops' exists; left as it is."


@pytest.mark.django_db
def test_make_run_refuses_a_weak_password_and_says_why_without_echoing_it() -> None:
    notice = devserver.ensure_admin(
        {"HOOKSVC_ADMIN_USERNAME": "ops", "HOOKSVC_ADMIN_PASSWORD": "12345"}
    )
    assert not User.objects.exists()
    assert "not created" in notice and "too short" in notice
    assert "12345" not in notice


@pytest.mark.django_db
def test_without_the_variables_make_run_says_how_to_create_an_admin_user() -> None:
    assert "manage.py createsuperuser" in devserver.ensure_admin({})
    assert not User.objects.exists()
    User.objects.create_superuser("root", password=PASSWORD)
    assert devserver.ensure_admin({}) == ""
    assert "both variables are needed" in devserver.ensure_admin({"HOOKSVC_ADMIN_USERNAME": "x"})


# --- `make run` itself, on a machine with nothing running ------------------------------

#: The README's five-minute start, run as written against a served `make run`.
README = servers.ROOT / "README.md"


def _readme_block(after: str, language: str = "sh") -> str:
    """The first fenced block of `language` after the line containing `after`."""
    text = README.read_text()
    rest = text[text.index(after) :]
    block = re.search(rf"```{language}\n(.*?)```", rest, flags=re.DOTALL)
    assert block, f"no ```{language} block after {after!r} in README.md"
    return textwrap.dedent(block.group(1))


@dataclasses.dataclass
class _MakeRun:
    process: subprocess.Popen[bytes]
    log_path: Path
    port: int

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_line(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.process.poll() is not None:
                raise AssertionError(f"make run ended before {text!r}:\n{self.log()}")
            assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{self.log()}"
            time.sleep(0.2)


def _clean_env() -> dict[str, str]:
    """A new shell: nothing of hooksvc's exported."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HOOKSVC_", "DATABASE_", "CELERY_", "PROMETHEUS_", "DJANGO_"))
    }


@contextlib.contextmanager
def _make_run(
    data_dir: Path,
    cwd: Path,
    log_path: Path,
    *,
    pid1: bool,
    extra_env: dict[str, str] | None = None,
) -> Iterator[_MakeRun]:
    """`make run`'s command, as a fresh machine runs it: no DATABASE_URL, no broker server."""
    port = servers.free_port()
    env = _clean_env()
    env.update(
        {
            "PYTHONPATH": str(servers.ROOT),
            "HOOKSVC_DATA_DIR": str(data_dir),
            "HOOKSVC_BIND": f"127.0.0.1:{port}",
            "HOOKSVC_WEB_WORKERS": "1",
            "HOOKSVC_ADMIN_USERNAME": "ops",
            "HOOKSVC_ADMIN_PASSWORD": PASSWORD,
            **(extra_env or {}),
        }
    )
    command = [sys.executable, "-m", "hooksvc.serving.devserver"]
    if pid1:
        command = ["unshare", "--pid", "--fork", "--mount-proc", *command]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    run = _MakeRun(process, log_path, port)
    try:
        yield run
    finally:
        if process.poll() is None:
            # Its own stop first: its children and PostgreSQL have sessions of their own.
            with contextlib.suppress(ProcessLookupError, AssertionError):
                target = processes.Pid1(process, log_path).inner() if pid1 else process.pid
                os.kill(target, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


#: curl's exit status when it could not connect (curl's man page, EXIT CODES).
CURL_COULDNT_CONNECT = 7


def _curl(run: _MakeRun, data_dir: Path, command: str) -> dict[str, object]:
    """Run a curl command of the README against `run` (its port and CA instead of 9443's).

    A refused connection is tried again for a while, as long as `make run` is up: a clean-clone
    run of the whole suite once saw one while gunicorn had already logged "Booting worker"
    (not reproduced alone). Any other failure, or a refusal that lasts, fails with the log.
    """
    command = command.replace("https://localhost:9443", f"https://localhost:{run.port}")
    command = command.replace("var/tls/ca.crt", str(data_dir / "tls" / "ca.crt"))
    deadline = time.monotonic() + 30
    while True:
        done = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, timeout=60, check=False
        )
        refused = done.returncode == CURL_COULDNT_CONNECT
        if not refused or run.process.poll() is not None or time.monotonic() > deadline:
            break
        print(f"curl could not connect to make run's port {run.port}: trying again")
        time.sleep(0.5)
    assert done.returncode == 0, f"{done.stderr}\nmake run's log:\n{run.log()[-4000:]}"
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


@pytest.mark.slow
def test_make_run_serves_the_readme_start_keeps_its_database_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    """Two `make run`s on one data directory: the first makes the local PostgreSQL (initdb)
    and the admin user, answers the README's curl sample, and stops with its database on
    Ctrl-C; the second finds both again and, as PID 1 of a PID namespace (a container's
    situation, see tests/deploy/test_sigterm.py), stops within 5 s of SIGTERM."""
    if shutil.which("curl") is None:
        pytest.skip("the README's sample uses curl, which is not installed")
    # PostgreSQL runs as devdb.ROOT_STAND_IN when the tests run as root: it must reach it.
    data_dir = Path(tempfile.mkdtemp(prefix="hooksvc-make-run-"))
    data_dir.chmod(0o755)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    try:
        with _make_run(data_dir, cwd, tmp_path / "first.log", pid1=False) as first:
            first.wait_for_line("Stop with Ctrl-C.")
            log = first.log()
            assert "made it on this first run" in log
            assert f"Admin: https://localhost:{first.port}/admin/" in log
            assert "Created the admin user 'ops'" in log and PASSWORD not in log
            first.wait_for_line("Booting worker")
            curl = _readme_block("A hook call as CAPI makes it")
            answer = _wait_for_answer(first, data_dir, curl)
            assert (answer["status"], answer.get("retryAfterSeconds")) == ("Success", 0)
            template = _readme_block("Add one that waits for a person's approval")
            applied = subprocess.run(
                ["bash", "-c", template.replace(".venv/bin/python", sys.executable)],
                cwd=servers.ROOT,
                env={
                    **os.environ,
                    "DJANGO_SETTINGS_MODULE": "hooksvc.settings",
                    "HOOKSVC_DATA_DIR": str(data_dir),
                },
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert applied.returncode == 0, applied.stdout + applied.stderr
            held = _curl(first, data_dir, curl)
            # The new run is due to start at once: CAPI may call again in a second.
            assert held["status"] == "Success" and held["retryAfterSeconds"] == 1, held
            assert held["message"] == "workflow approve-new-clusters is starting", held
            deadline = time.monotonic() + 60
            while "waiting for approval" not in str(held["message"]):
                assert time.monotonic() < deadline, f"the worker did not start the run: {held}"
                time.sleep(0.5)
                held = _curl(first, data_dir, curl)
            assert held["retryAfterSeconds"] == 10, held
            # Ctrl-C: the terminal sends SIGINT to make run's process group.
            os.killpg(first.process.pid, signal.SIGINT)
            assert first.process.wait(timeout=30) == 0, first.log()
        server_log = (data_dir / "postgres" / "server.log").read_text()
        assert server_log.rstrip().endswith("database system is shut down"), server_log[-2000:]
        assert not (data_dir / "postgres" / "data" / "postmaster.pid").exists()
        # The broker's messages stay in the data directory, not the working one.
        assert not list(cwd.iterdir())
        assert (data_dir / "redis" / "data" / "appendonly.aof").is_file()
        assert not (data_dir / "make-run.json").exists(), "the record outlived make run"

        pid1 = not processes.unshare_works()
        with _make_run(data_dir, cwd, tmp_path / "second.log", pid1=pid1) as second:
            second.wait_for_line("Stop with Ctrl-C.")
            assert "its data kept from before" in second.log()
            assert "Admin user 'ops' exists; left as it is." in second.log()
            second.wait_for_line("Booting worker")
            second.wait_for_line(" ready.")  # the Celery worker's: SIGTERM finds it serving
            assert _curl(second, data_dir, curl)["retryAfterSeconds"] == 10
            if pid1:
                code, seconds = processes.Pid1(second.process, second.log_path).sigterm()
                print(f"make run as PID 1 stopped {seconds:.1f} s after SIGTERM")
            else:
                second.process.send_signal(signal.SIGTERM)
                code = second.process.wait(timeout=processes.STOP_SECONDS)
        assert code == 0, second.log()
        server_log = (data_dir / "postgres" / "server.log").read_text()
        assert server_log.rstrip().endswith("database system is shut down"), server_log[-2000:]
    finally:
        _kill_leftover_postgres(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


def _kill_leftover_postgres(data_dir: Path) -> None:
    """A failed test may leave the local PostgreSQL running (it has a session of its own)."""
    pid_file = data_dir / "postgres" / "data" / "postmaster.pid"
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        os.kill(int(pid_file.read_text().split()[0]), signal.SIGQUIT)


def _wait_for_answer(run: _MakeRun, data_dir: Path, curl: str) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while True:
        try:
            return _curl(run, data_dir, curl)
        except (AssertionError, json.JSONDecodeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# --- a broker or a worker that dies under `make run` ------------------------------------------

APPROVAL_TEMPLATE = """\
apiVersion: hooksvc/v1alpha1
kind: WorkflowTemplate
metadata:
  name: approve-new-clusters
spec:
  hook: BeforeClusterCreate
  steps:
    - name: approve
      type: approval
      with: {message: "Check the new cluster's spec, then approve"}
"""


def _beside(data_dir: Path, *args: str, stdin: str = "") -> str:
    """A manage.py command in another shell beside `make run`: only the data directory set."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=servers.ROOT,
        env={**_clean_env(), "HOOKSVC_DATA_DIR": str(data_dir)},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _awaiting_approval(data_dir: Path) -> int:
    runs = json.loads(
        _beside(data_dir, "workflows", "list", "--state", "awaiting_approval", "-o", "json")
    )
    assert len(runs) == 1, runs
    run_id: int = runs[0]["id"]
    return run_id


def _answer_until(run: _MakeRun, data_dir: Path, curl: str, wanted: str) -> dict[str, object]:
    """Call until the message holds `wanted` (or, with "0", until the hook lets go)."""
    deadline = time.monotonic() + 120
    while True:
        answer = _curl(run, data_dir, curl)
        assert answer["status"] == "Success", answer
        if wanted in str(answer.get("message", "")) or (
            wanted == "0" and answer.get("retryAfterSeconds") == 0
        ):
            return answer
        assert time.monotonic() < deadline, f"no {wanted!r}: {answer}\n{run.log()[-4000:]}"
        time.sleep(0.5)


def _child_running(run: _MakeRun, word: str, timeout: float = 60) -> int:
    """The PID of `make run`'s child whose command line holds `word` (from /proc), once there
    is one: a child that Redis's death made exit (Celery's consumer can, see the supervisor)
    is between its exit and its restart for a moment."""
    parent = run.process.pid
    deadline = time.monotonic() + timeout
    while True:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            # The parent's PID is the second field after the command's closing parenthesis.
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent and word in command:
                return int(entry.name)
        assert time.monotonic() < deadline, (
            f"no child of {parent} runs {word!r}\n{run.log()[-4000:]}"
        )
        time.sleep(0.2)


def _root_only_data_dir(tmp_path: Path) -> Path:
    """var/ of a checkout in a directory only root may enter (root's home is mode 700)."""
    home = tmp_path / "root-home"
    home.mkdir(mode=0o700)
    return home / "hooksvc" / "var"


def _cleanup(data_dir: Path) -> None:
    _kill_leftover_postgres(data_dir)
    link = data_dir / "postgres"
    if link.is_symlink():  # as root, the server's home was made under /var/lib/hooksvc
        shutil.rmtree(link.resolve(), ignore_errors=True)


@pytest.mark.slow
def test_make_run_outlives_its_broker_and_worker_from_a_directory_only_root_may_enter(
    tmp_path: Path,
) -> None:
    """The issue's crash (kombu's filesystem transport: `_get` moves and reads a message file
    that `_put` has created but not yet written, kombu/transport/filesystem.py, celery/kombu
    #1551) took the whole of `make run` with it. Now the broker is a local Redis, and when it
    or the worker dies the hook keeps answering from PostgreSQL, the supervisor says so in one
    line and starts it again, and the worker does the work an operator asks for, from a
    manage.py beside it with nothing exported. As root, the data directory is where
    devdb.ROOT_STAND_IN (who runs PostgreSQL) cannot enter."""
    if shutil.which("curl") is None:
        pytest.skip("the README's sample uses curl, which is not installed")
    data_dir = _root_only_data_dir(tmp_path)
    curl = _readme_block("A hook call as CAPI makes it")
    try:
        with _make_run(data_dir, tmp_path, tmp_path / "make-run.log", pid1=False) as run:
            run.wait_for_line(" ready.")
            if os.geteuid() == 0:
                assert f"where {devdb.ROOT_STAND_IN} may enter" in run.log()
            assert "workflowtemplate/approve-new-clusters created" in _beside(
                data_dir, "apply_workflows", "-f", "-", stdin=APPROVAL_TEMPLATE
            )
            _answer_until(run, data_dir, curl, "waiting for approval")

            broker_pid = int((data_dir / "redis" / "redis.pid").read_text())
            os.kill(broker_pid, signal.SIGKILL)
            held = _curl(run, data_dir, curl)  # at once: the broker is down or just back
            assert held["status"] == "Success" and held["retryAfterSeconds"] == 10, held
            run.wait_for_line(
                f"make run: the broker (Redis) (PID {broker_pid}) was killed by SIGKILL:"
                " starting it again in 1 s; the hook keeps answering from PostgreSQL meanwhile"
            )
            run.wait_for_line("make run: the broker (Redis) started again (PID ")

            worker = _child_running(run, "celery")
            os.kill(worker, signal.SIGKILL)
            run.wait_for_line(
                f"make run: the Celery worker (and beat) (PID {worker}) was killed by SIGKILL:"
                " starting it again in 1 s"
            )
            assert _curl(run, data_dir, curl)["retryAfterSeconds"] == 10
            run.wait_for_line("make run: the Celery worker (and beat) started again (PID ")

            run_id = _awaiting_approval(data_dir)
            _beside(
                data_dir,
                "workflows",
                "approve",
                str(run_id),
                "--step",
                "approve",
                "--reason",
                "checked the spec",
            )
            _answer_until(run, data_dir, curl, "0")
            log = run.log()
            assert "Traceback (most recent call last)" not in log, "a traceback wall"
            run.process.send_signal(signal.SIGTERM)
            assert run.process.wait(timeout=30) == 0, run.log()[-4000:]
            assert "giving up" not in log
    finally:
        _cleanup(data_dir)


@pytest.mark.slow
def test_manage_py_beside_make_run_reaches_the_broker_it_was_given(tmp_path: Path) -> None:
    """`make run` with CELERY_BROKER_URL exported; an approval from a manage.py in another
    shell, with nothing exported, reaches that broker and the worker does it at once. Before,
    manage.py used the default broker ("No hostname was supplied") and the work waited for the
    reconciler, here off (HOOKSVC_RECONCILE_SECONDS) so that only the message can do it."""
    if shutil.which("curl") is None:
        pytest.skip("the README's sample uses curl, which is not installed")
    redis_server = private.PrivateRedis(tmp_path / "redis")
    redis_server.start()
    data_dir = Path(tempfile.mkdtemp(prefix="hooksvc-make-run-"))
    data_dir.chmod(0o755)
    curl = _readme_block("A hook call as CAPI makes it")
    env = {"CELERY_BROKER_URL": redis_server.url, "HOOKSVC_RECONCILE_SECONDS": "3600"}
    try:
        with _make_run(
            data_dir, tmp_path, tmp_path / "make-run.log", pid1=False, extra_env=env
        ) as run:
            run.wait_for_line(" ready.")
            port = redis_server.url.rsplit(":", 1)[1]
            assert f".> transport:   redis://:**@127.0.0.1:{port}" in run.log()
            assert not (data_dir / "redis").exists(), "a local broker beside the one given"
            _beside(data_dir, "apply_workflows", "-f", "-", stdin=APPROVAL_TEMPLATE)
            _answer_until(run, data_dir, curl, "waiting for approval")
            shown = _beside(
                data_dir,
                "shell",
                "-v",
                "0",
                "-c",
                "from django.conf import settings; print(settings.CELERY_BROKER_URL)",
            )
            assert shown.strip() == redis_server.url
            approved = _beside(
                data_dir,
                "workflows",
                "approve",
                str(_awaiting_approval(data_dir)),
                "--step",
                "approve",
                "--reason",
                "checked the spec",
            )
            assert "broker unavailable" not in approved and "No hostname" not in approved
            _answer_until(run, data_dir, curl, "0")
            assert "reconciler re-enqueued" not in run.log()
    finally:
        shutil.rmtree(data_dir / "tls", ignore_errors=True)
        _kill_leftover_postgres(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
        redis_server.stop()
