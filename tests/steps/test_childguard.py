"""A command started under workflows/steps/childguard.py ends with the process that
started it, even when that process is SIGKILLed, and otherwise behaves as if run directly.

prctl(2): PR_SET_PDEATHSIG is delivered when the thread that forked the child ends, and
survives execve of a binary that is not set-user-ID. subprocess's docs: `preexec_fn` is not
safe in a process with threads, hence the guard of one thread that asks for it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from workflows.steps import childguard


def _wait(what: str, condition: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not callable(condition) or not condition():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_output_input_and_status_pass_through_the_guard() -> None:
    process = childguard.popen(
        ["sh", "-c", "read line; echo out:$line; echo err >&2; exit 7"],
        1,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = process.communicate("given\n", timeout=20)
    assert (out, err, process.returncode) == ("out:given\n", "err\n", 7)


def test_a_command_killed_by_a_signal_reads_as_killed_by_it() -> None:
    process = childguard.popen(["sh", "-c", "kill -KILL $$"], 1)
    assert process.wait(timeout=20) == -signal.SIGKILL


def test_terminate_passes_sigterm_on_and_kills_after_the_grace(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    process = childguard.popen(
        ["sh", "-c", f"trap '' TERM; echo $$ > {pid_file}; while true; do sleep 0.1; done"], 1
    )
    _wait("the command", lambda: pid_file.exists() and pid_file.read_text().strip())
    process.terminate()
    assert process.wait(timeout=20) == -signal.SIGKILL, "it ignored SIGTERM: killed after 1 s"
    assert not _alive(int(pid_file.read_text()))


def _supervisor(tmp_path: Path, ignore_term: bool) -> tuple[subprocess.Popen[str], int]:
    """A process that starts a command under the guard from a thread, as a step call does,
    and prints the command's pid."""
    trap = "trap '' TERM; " if ignore_term else ""
    command = ["sh", "-c", f"{trap}echo $$ > {tmp_path}/pid; while true; do sleep 0.1; done"]
    script = textwrap.dedent(
        f"""
        import threading, time
        from workflows.steps import childguard
        def call():
            childguard.popen({command!r}, 1).wait()
        threading.Thread(target=call, daemon=True).start()
        time.sleep(600)
        """
    )
    supervisor = subprocess.Popen(
        [sys.executable, "-c", script], cwd=Path(__file__).parents[2], text=True
    )
    pid_file = tmp_path / "pid"
    _wait("the command", lambda: pid_file.exists() and pid_file.read_text().strip())
    return supervisor, int(pid_file.read_text())


def test_the_command_ends_when_its_supervisor_is_sigkilled(tmp_path: Path) -> None:
    supervisor, pid = _supervisor(tmp_path, ignore_term=False)
    supervisor.kill()
    supervisor.wait(timeout=20)
    _wait("the command to end", lambda: not _alive(pid))


def test_a_command_that_ignores_sigterm_is_killed_a_grace_after_its_supervisor_dies(
    tmp_path: Path,
) -> None:
    supervisor, pid = _supervisor(tmp_path, ignore_term=True)
    supervisor.kill()
    supervisor.wait(timeout=20)
    _wait("the command to end", lambda: not _alive(pid))


def test_what_the_command_started_ends_with_it_after_the_grace(tmp_path: Path) -> None:
    """A process the command started (helm's plugins, post-renderers) holds its pipes: after
    the grace the guard SIGKILLs the whole group, so nobody waits on them for ever."""
    pid_file = tmp_path / "pid"
    process = childguard.popen(
        ["sh", "-c", f"trap '' TERM; sleep 600 & echo $! > {pid_file}; wait"],
        1,
        stdout=subprocess.PIPE,
    )
    _wait("the grandchild", lambda: pid_file.exists() and pid_file.read_text().strip())
    process.terminate()
    process.communicate(timeout=20)
    assert process.returncode == -signal.SIGKILL
    _wait("the grandchild to end", lambda: not _alive(int(pid_file.read_text())))
