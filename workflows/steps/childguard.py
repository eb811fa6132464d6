"""A command a step starts (helm) that cannot outlive the process that supervises it.

Why a guard process: on Linux a child outlives its parent unless it asked the kernel for a
parent-death signal (prctl(2) PR_SET_PDEATHSIG). Python can ask only between fork and exec,
through `preexec_fn`, which the `subprocess` docs call unsafe in a process with threads: the
step calls that start helm run on threads of a Celery pool process. So `popen` starts this
file as a script, a process of a single thread that may ask safely:

- The guard asks for SIGTERM when its parent thread ends (prctl(2): the signal follows the
  thread that forked, and every thread ends when a pool process is SIGKILLed or exits to be
  replaced, workflows/tasks.py), then starts the command asking for SIGKILL when the guard
  ends. A guard that found its parent already gone exits at once.
- On SIGTERM, from its parent or from the parent's death, the guard passes SIGTERM on (helm
  then records its release failed: helm v3.17 cmd/helm/install.go and upgrade.go cancel the
  operation on SIGINT and SIGTERM), waits `grace` seconds and then SIGKILLs its process
  group: the command, anything it started, and the guard. So even a command that ignores
  SIGTERM ends within `grace` of its supervisor's death.
- It runs in a process group of its own (`process_group=0`), so a signal meant for the
  worker's group (a terminal's Ctrl-C) does not bypass this order.

The guard exits as the command did: with its status, or killed by the same signal, so the
caller reads `returncode` as if it had run the command itself.

This file imports only the standard library: it runs as `python -I childguard.py`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal

# Runs the caller's fixed binary, never a shell.
import subprocess  # nosec B404
import sys
from typing import Any

PR_SET_PDEATHSIG = 1


def _on_parent_death(signum: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def popen(command: list[str], grace: float, **kwargs: Any) -> subprocess.Popen[str]:
    """Starts `command` under a guard; `terminate()` stops it with SIGTERM, then SIGKILL
    after `grace` seconds; `kill()` ends both at once."""
    guard = [sys.executable, "-I", __file__, str(os.getpid()), str(grace), *command]
    kwargs.setdefault("stdin", subprocess.DEVNULL)  # the guard reads its input to the end
    return subprocess.Popen(guard, process_group=0, **kwargs)  # noqa: S603  # nosec B603


def _guard(parent: int, grace: float, command: list[str]) -> int:
    _on_parent_death(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request: nobody supervises
        return 128 + signal.SIGTERM
    # The command writes into the guard's pipes, not the supervisor's: once the supervisor
    # is gone, a write to its pipe would kill a Go program (helm) with SIGPIPE before it
    # records anything (Go os/signal: "a write to a broken pipe on file descriptors 1 or 2
    # will cause the program to exit with a SIGPIPE signal"). What it wrote is passed on
    # when it ends, as far as anyone still reads. This process has one thread, so
    # preexec_fn is safe here.
    given = sys.stdin.buffer.read()
    stopped: list[int] = []

    def stop(signum: int, frame: object) -> None:
        # Nothing waits in a handler: the main thread waits in communicate().
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stopped.append(signum)
        if child is not None:
            child.send_signal(signal.SIGTERM)
        signal.setitimer(signal.ITIMER_REAL, grace)

    def kill(signum: int, frame: object) -> None:
        # The whole group, this guard included: a process the command started may hold its
        # pipes open, and communicate() would wait on them for ever.
        os.killpg(0, signal.SIGKILL)

    child: subprocess.Popen[bytes] | None = None
    signal.signal(signal.SIGALRM, kill)
    signal.signal(signal.SIGTERM, stop)
    child = subprocess.Popen(  # noqa: S603  # nosec B603
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: _on_parent_death(signal.SIGKILL),  # noqa: PLW1509 (one thread)
    )
    if stopped:  # asked to stop while it was being started
        child.send_signal(signal.SIGTERM)
    out, err = child.communicate(given)
    for stream, data in ((sys.stdout.buffer, out), (sys.stderr.buffer, err)):
        with contextlib.suppress(OSError):  # nobody reads any more
            stream.write(data)
            stream.flush()
    code = child.returncode
    if code < 0:  # killed by a signal: end the same way, so the caller sees it
        if -code != signal.SIGKILL:  # SIGKILL has no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(_guard(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]))
