"""SIGTERM for a hooksvc process that is PID 1, as a container's first process is.

The kernel delivers to the init process of a PID namespace only the signals it has a handler
for; with the default action, SIGTERM is dropped (man7.org pid_namespaces(7), "The namespace
init process"). Python installs no SIGTERM handler, so `manage.py migrate` or
`watch_clusters` started by the image's entrypoint would ignore `docker stop` and Kubernetes'
SIGTERM and be SIGKILLed at the end of the grace period. gunicorn and Celery install their own
handlers once they start, replacing this one; `install()` (called by `hooksvc.celery`, which
every hooksvc process imports first) covers everything else and the time before they do:
SIGTERM ends the process by SystemExit, so `finally` blocks and transaction rollbacks run
(`leave`).
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import NoReturn

#: How long the way out may take before the process ends without it.
LEAVE_SECONDS = 3.0


def leave(code: int) -> NoReturn:
    """Raise SystemExit(code) from a signal handler, and make sure the process ends anyway.

    Python runs a handler between two bytecodes of the main thread; when those belong to a
    `__del__` or a weakref callback, what the handler raises is printed and dropped ("Exception
    ignored in ..."), and the process would go on. A non-daemon thread can also hold the exit
    up. So a timer ends the process after LEAVE_SECONDS if the SystemExit has not.
    """
    timer = threading.Timer(LEAVE_SECONDS, os._exit, (code,))
    timer.daemon = True
    timer.start()
    raise SystemExit(code)


def _exit(signum: int, frame: FrameType | None) -> None:
    # The shell's convention for "ended by signal N": what the default action would report.
    leave(128 + signum)


def install() -> bool:
    """As PID 1, make SIGTERM end this process; elsewhere the default action does already.

    Returns whether a handler was installed. A handler set before (gunicorn, Celery, a
    command's own) is kept.
    """
    if os.getpid() != 1 or threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _exit)
    return True
