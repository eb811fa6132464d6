"""`make run`'s processes kept running: one that dies is started again, and the terminal says so.

hooksvc.serving.devserver starts gunicorn, the Celery worker (with beat) and, without
CELERY_BROKER_URL, the local broker (hooksvc.devbroker) as `Child`ren of a `Supervisor`. When
one exits on its own, the supervisor prints one line (which, how it ended, when it starts
again, what goes on meanwhile) and starts it again after a backoff; the others go on, so the
hook keeps answering from PostgreSQL while the broker or the worker is down. A child that
keeps dying right after its start (a port in use, a broken setting) is given up after
GIVE_UP_AFTER tries, and `make run` stops with that line rather than loop for ever.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal

# bandit B404: the children are started from fixed argument lists, no shell.
import subprocess  # nosec B404
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from hooksvc.serving import terminal

#: A child that ran this long before it died is taken to have worked: its backoff starts over.
SETTLED_SECONDS = 30.0
#: How many times in a row a child may die before SETTLED_SECONDS before make run gives up.
GIVE_UP_AFTER = 5
#: The longest wait before a start again.
MAX_BACKOFF_SECONDS = 16.0


class Process(Protocol):
    """What the supervisor needs of a child's process (a Popen, or a server's)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...


@dataclasses.dataclass
class Child:
    """One process of `make run`: how to start it, and what goes on while it is down."""

    #: As the terminal names it: "the Celery worker (and beat)".
    name: str
    #: Starts it and returns its process; raising is a failed start, tried again later.
    start: Callable[[], Process]
    #: Stops it (SIGTERM to its process group, or the server's own stop).
    terminate: Callable[[Process], None]
    #: What goes on while it is down, said when it dies.
    meanwhile: str = ""
    process: Process | None = None
    started_at: float = 0.0
    #: Deaths in a row, each before SETTLED_SECONDS.
    quick_deaths: int = 0
    #: When it is due to start again (monotonic), while it is down.
    restart_at: float | None = None
    restarts: int = 0


def how_it_ended(returncode: int) -> str:
    """'exited with status 1', 'was killed by SIGKILL' (Popen's negative codes)."""
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-returncode).name}"
        return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def popen_child(
    name: str,
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    log_path: Path,
    meanwhile: str = "",
) -> Child:
    """A child run as a command in a session of its own (Ctrl-C reaches only make run), its
    output relayed to `log_path` and, tracebacks folded, to the terminal (hooksvc.serving.terminal).
    """

    def start() -> Process:
        # bandit B603: fixed argument lists built by the devserver; no shell, no input.
        process = subprocess.Popen(  # noqa: S603  # nosec B603
            list(command),
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if process.stdout is not None:  # it is: stdout=PIPE
            terminal.Relay(process.stdout, log_path, sys.stdout).start()
        return process

    def terminate(process: Process) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)

    return Child(name=name, start=start, terminate=terminate, meanwhile=meanwhile)


class GaveUp(Exception):
    """A child kept dying right after its start; the message says which."""


class Supervisor:
    """Starts the children, and starts again each one that dies (`check`, called in a loop)."""

    def __init__(
        self,
        children: Sequence[Child],
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.children = list(children)
        self.say = say
        self.clock = clock

    def start_all(self) -> None:
        """Start the children not started yet (one may have been, to see it start)."""
        for child in self.children:
            if child.process is None:
                self._start(child)

    def _start(self, child: Child) -> None:
        child.restart_at = None
        child.started_at = self.clock()
        try:
            child.process = child.start()
        except Exception as exc:  # a failed start counts as a death, said in one line
            child.process = None
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self._died(child, f"could not start ({first_line})")

    def check(self) -> None:
        """Notice children that died; start again those whose backoff is over."""
        now = self.clock()
        for child in self.children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.restarts += 1
                    self._start(child)
                    if child.process is not None:
                        self.say(f"make run: {child.name} started again (PID {child.process.pid})")
                continue
            if child.process is None:
                continue
            code = child.process.poll()
            if code is not None:
                pid = child.process.pid
                # What it left in its process group (gunicorn's workers still hold the port)
                # goes with it, before it starts again.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                self._died(child, f"(PID {pid}) {how_it_ended(code)}")

    def _died(self, child: Child, what: str) -> None:
        now = self.clock()
        child.process = None
        lived = now - child.started_at
        child.quick_deaths = child.quick_deaths + 1 if lived < SETTLED_SECONDS else 1
        if child.quick_deaths >= GIVE_UP_AFTER:
            raise GaveUp(
                f"make run: {child.name} {what}, {child.quick_deaths} times in a row within"
                f" {SETTLED_SECONDS:g} s of its start: giving up (its own lines above say why)"
            )
        delay = min(MAX_BACKOFF_SECONDS, 2.0 ** (child.quick_deaths - 1))
        child.restart_at = now + delay
        meanwhile = f"; {child.meanwhile}" if child.meanwhile else ""
        self.say(f"make run: {child.name} {what}: starting it again in {delay:g} s{meanwhile}")

    def stop(self, children: Sequence[Child], until: float) -> None:
        """Stop `children` at once; kill each one still running at `until` (monotonic)."""
        for child in children:
            child.restart_at = None
            if child.process is not None and child.process.poll() is None:
                child.terminate(child.process)
        for child in children:
            self._wait(child, until)

    def _wait(self, child: Child, until: float) -> None:
        process = child.process
        if process is None:
            return
        while process.poll() is None and self.clock() < until:
            time.sleep(0.05)
        if process.poll() is None:
            self.say(f"make run: {child.name} did not stop in time: killed")
            # Its process group (its session): the worker's pool processes too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            while process.poll() is None:
                time.sleep(0.05)
