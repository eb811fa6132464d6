"""`make run`'s supervisor and terminal: a process that dies is started again and the terminal
says so in one line; one that keeps dying at once is given up; a traceback is one line.

The processes are real (short Python commands); the supervisor's clock is the test's, so that
backoffs pass without sleeping through them.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from hooksvc.serving import supervise, terminal


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _child(tmp_path: Path, name: str, code: str) -> supervise.Child:
    return supervise.popen_child(
        name,
        [sys.executable, "-c", code],
        {"PATH": "/usr/bin:/bin"},
        log_path=tmp_path / f"{name}.log",
        meanwhile="the hook keeps answering from PostgreSQL meanwhile",
    )


def _wait_exit(child: supervise.Child) -> None:
    assert child.process is not None
    assert isinstance(child.process, subprocess.Popen)
    child.process.wait(timeout=30)


def test_a_child_that_dies_is_started_again_and_the_terminal_says_so_in_one_line(
    tmp_path: Path,
) -> None:
    said: list[str] = []
    clock = Clock()
    marker = tmp_path / "second-start"
    # Dies at once the first time; the second start lives on.
    code = (
        "import pathlib, sys, time\n"
        f"p = pathlib.Path({str(marker)!r})\n"
        "if not p.exists():\n    p.touch(); sys.exit(3)\n"
        "time.sleep(60)\n"
    )
    worker = _child(tmp_path, "the worker", code)
    supervisor = supervise.Supervisor([worker], say=said.append, clock=clock)
    supervisor.start_all()
    first = worker.process
    assert first is not None
    _wait_exit(worker)
    supervisor.check()
    assert said == [
        f"make run: the worker (PID {first.pid}) exited with status 3: starting it again in 1 s;"
        " the hook keeps answering from PostgreSQL meanwhile"
    ]
    assert worker.process is None
    clock.now += 0.5
    supervisor.check()
    assert worker.process is None, "started again before its backoff"
    clock.now += 0.5
    supervisor.check()
    assert worker.process is not None and worker.process.pid != first.pid
    assert said[-1] == f"make run: the worker started again (PID {worker.process.pid})"
    assert worker.restarts == 1
    supervisor.stop([worker], until=time.monotonic() + 10)
    assert worker.process.poll() is not None


def test_a_child_that_keeps_dying_at_once_is_given_up_after_growing_waits(tmp_path: Path) -> None:
    said: list[str] = []
    clock = Clock()
    web = _child(tmp_path, "gunicorn", "import sys; print('Connection in use'); sys.exit(1)")
    supervisor = supervise.Supervisor([web], say=said.append, clock=clock)
    supervisor.start_all()
    waits = []
    pid = 0
    with pytest.raises(supervise.GaveUp) as gave_up:
        for _ in range(supervise.GIVE_UP_AFTER):
            assert web.process is not None
            pid = web.process.pid
            _wait_exit(web)
            supervisor.check()
            assert web.restart_at is not None
            waits.append(web.restart_at - clock.now)
            clock.now = web.restart_at
            supervisor.check()  # started again
    assert waits == [1, 2, 4, 8]
    assert str(gave_up.value) == (
        f"make run: gunicorn (PID {pid}) exited with status 1, {supervise.GIVE_UP_AFTER} times"
        " in a row within 30 s of its start: giving up (its own lines above say why)"
    )
    assert "Connection in use" in (tmp_path / "gunicorn.log").read_text()


def test_a_child_that_lived_a_while_before_dying_starts_its_backoff_over(tmp_path: Path) -> None:
    said: list[str] = []
    clock = Clock()
    worker = _child(tmp_path, "the worker", "import sys; sys.exit(1)")
    supervisor = supervise.Supervisor([worker], say=said.append, clock=clock)
    worker.quick_deaths = supervise.GIVE_UP_AFTER - 1
    supervisor.start_all()
    _wait_exit(worker)
    clock.now += supervise.SETTLED_SECONDS
    supervisor.check()  # it ran 30 s: not given up, waits 1 s again
    assert "starting it again in 1 s" in said[-1]
    assert worker.quick_deaths == 1


def test_a_failed_start_counts_as_a_death_said_in_one_line() -> None:
    said: list[str] = []

    def start() -> supervise.Process:
        raise RuntimeError("Redis stopped at once:\nlast lines of its log")

    broker = supervise.Child(name="the broker (Redis)", start=start, terminate=lambda p: None)
    supervisor = supervise.Supervisor([broker], say=said.append, clock=Clock())
    supervisor.start_all()
    assert said == [
        "make run: the broker (Redis) could not start (Redis stopped at once:): starting it"
        " again in 1 s"
    ]


def _traceback_text() -> str:
    """A chained traceback as Python prints it, between two log lines."""
    code = (
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stdout, format='%(levelname)s %(message)s')\n"
        "try:\n"
        "    try:\n        raise ConnectionError('Connection closed by server.')\n"
        "    except ConnectionError:\n        {}['hostname']\n"
        "except KeyError:\n    logging.critical('Unrecoverable error', exc_info=True)\n"
        "print('worker: Warm shutdown')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout


def test_a_traceback_reaches_the_terminal_as_one_line_and_the_log_whole(tmp_path: Path) -> None:
    text = _traceback_text()
    assert "During handling of the above exception" in text
    shown: list[str] = []
    folder = terminal.Folder(shown.append, where="var/log/worker.log")
    for line in text.splitlines(keepends=True):
        folder.feed(line)
    folder.end()
    frames = len(text.splitlines()) - 2
    assert shown == [
        "CRITICAL Unrecoverable error\n",
        f"    (a traceback of {frames} lines, ending KeyError: 'hostname':"
        " in var/log/worker.log)\n",
        "worker: Warm shutdown\n",
    ]


def test_the_relay_keeps_every_line_in_the_log_file(tmp_path: Path) -> None:
    text = _traceback_text()
    source = tmp_path / "out.txt"
    source.write_text(text)
    shown = tmp_path / "terminal.txt"
    with source.open("rb") as stream, shown.open("w") as screen:
        relay = terminal.Relay(stream, tmp_path / "log" / "worker.log", screen)
        relay.start()
        relay.thread.join(timeout=30)
    assert (tmp_path / "log" / "worker.log").read_text() == text
    assert "Traceback" not in shown.read_text()
    assert shown.read_text().count("\n") == 3
