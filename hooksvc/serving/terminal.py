"""`make run`'s terminal: its children's lines, with each traceback folded into one line.

hooksvc.serving.supervise starts each child with its output on a pipe; `Relay` copies every
line into the child's log file under HOOKSVC_DATA_DIR/log/ (0600, in a 0700 directory, query
strings redacted) and passes it on to the terminal,
except the lines of a Python traceback, which become one line naming the exception and where
the whole traceback is. A crash says what happened in the line it logs ("Unrecoverable
error: ...") and the supervisor's line after it; the frames are for the log file.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from hooksvc import logs

_START = "Traceback (most recent call last):"
#: Lines between the tracebacks of chained exceptions (traceback.py's _cause_message and
#: _context_message).
_CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


class Folder:
    """Turns a stream of lines into the terminal's: tracebacks folded (`feed`, then `end`)."""

    def __init__(self, emit: Callable[[str], None], where: str) -> None:
        self.emit = emit
        self.where = where
        self._lines = 0
        self._exception = ""
        #: Whether the last line was the exception line that may end the traceback.
        self._after_exception = False

    def feed(self, line: str) -> None:
        if not self._lines:
            if line.rstrip("\n") == _START:
                self._lines = 1
            else:
                self.emit(line)
            return
        text = line.rstrip("\n")
        if self._after_exception and text.strip() and text not in _CHAINED and text != _START:
            self.end()
            self.feed(line)
            return
        self._lines += 1
        if text and not text[0].isspace() and text not in _CHAINED and text != _START:
            self._exception, self._after_exception = text, True
        elif text:
            self._after_exception = False

    def end(self) -> None:
        """The stream ended (or went on after a traceback): say the folded traceback."""
        if self._lines:
            last = self._exception or "no exception line"
            self.emit(f"    (a traceback of {self._lines} lines, ending {last}: in {self.where})\n")
        self._lines, self._exception, self._after_exception = 0, "", False


def open_log(path: Path) -> IO[str]:
    """`path` opened to append, the operator's alone: the file 0600 from its creation (not
    chmodded after), its directory 0700; files of earlier releases are narrowed."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "a", encoding="utf-8", errors="replace")


class Relay:
    """Copies a child's output to its log file and, folded, to the terminal (one thread)."""

    #: One lock for every relay: lines of two children never interleave within a line.
    _terminal_lock = threading.Lock()

    def __init__(self, stream: IO[bytes], log_path: Path, terminal: IO[str]) -> None:
        self.stream = stream
        self.log_path = log_path
        self.terminal = terminal
        self.thread = threading.Thread(target=self._run, name=f"relay {log_path.name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _say(self, line: str) -> None:
        with self._terminal_lock:
            self.terminal.write(line)
            self.terminal.flush()

    def _run(self) -> None:
        folder = Folder(self._say, where=str(self.log_path))
        with open_log(self.log_path) as log:
            for raw in iter(self.stream.readline, b""):
                # What a child prints unformatted (gunicorn's own lines) has no query either.
                line = logs.redact_queries(raw.decode("utf-8", errors="replace"))
                log.write(line)
                log.flush()
                folder.feed(line)
            folder.end()
        self.stream.close()
