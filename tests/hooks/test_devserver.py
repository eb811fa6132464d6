"""`make run`: its admin account (created from the environment, or a hint; never a default),
and the whole command on a machine with nothing running: its own PostgreSQL, the README's
five-minute start, a second start on the same data, and stopping on Ctrl-C or SIGTERM.
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

from hooksvc.serving import devserver
from tests.deploy import processes
from tests.support import servers

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


@contextlib.contextmanager
def _make_run(data_dir: Path, cwd: Path, log_path: Path, *, pid1: bool) -> Iterator[_MakeRun]:
    """`make run`'s command, as a fresh machine runs it: no DATABASE_URL, no broker server."""
    port = servers.free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HOOKSVC_", "DATABASE_", "CELERY_", "PROMETHEUS_", "DJANGO_"))
    }
    env.update(
        {
            "PYTHONPATH": str(servers.ROOT),
            "HOOKSVC_DATA_DIR": str(data_dir),
            "HOOKSVC_BIND": f"127.0.0.1:{port}",
            "HOOKSVC_WEB_WORKERS": "1",
            "HOOKSVC_ADMIN_USERNAME": "ops",
            "HOOKSVC_ADMIN_PASSWORD": PASSWORD,
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
    # PostgreSQL runs as `nobody` when the tests run as root: it must reach the directory.
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
        # The broker's exchange tables stay in the data directory, not the working one.
        assert not (cwd / "control").exists()
        assert (data_dir / "broker" / "control").is_dir()

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
