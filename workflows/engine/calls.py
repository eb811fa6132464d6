"""One call of a step's function, bounded: the step threads it runs on, and those given up.

A step that is not inline runs its function on a step thread of this process (a pool that
grows to the calls running at once; each thread keeps its database connection between
calls, as a Celery task thread does). The attempt (workflows.engine.attempts) waits for the
call at most until its bound and gets its outcome, or TIMED_OUT: so the attempt returns at
the bound whether the code returns or not, and the Celery slot serves the next step.

A call still running at its bound is abandoned: its thread is asked to stop (an
asynchronous `StepStopped`, which stops Python code at its next instruction; code blocked
in C, such as a socket read without a timeout, stops only once that returns) and leaves
the pool. What the call comes to is discarded, never recorded: the attempt recorded the
timeout, and the lease's compare-and-set would drop anything later. Abandoned threads still
alive are counted (`abandoned`, the step_threads_abandoned gauge): past
settings.STEP_THREADS_MAX_ABANDONED the process is `overloaded`, and a prefork pool
process asks to be replaced once its task is done (workflows.tasks).
"""

from __future__ import annotations

import contextvars
import ctypes
import dataclasses
import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection

from workflows import clock
from workflows.engine import observe

logger = logging.getLogger(__name__)


class StepStopped(BaseException):
    """Raised in a step thread whose call was abandoned at its bound.

    A BaseException, so that a step's `except Exception` does not swallow it.
    """


#: What `call` returns when the call did not end within its bound.
TIMED_OUT: Any = object()

#: The waiting attempt looks at the clock at least this often (clock.monotonic, which a test
#: may move on instead of waiting).
_WAIT_SLICE_SECONDS = 0.5


@dataclasses.dataclass(eq=False)
class _Call:
    fn: Callable[[], Any]
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None
    #: Set by the waiting attempt (under the pool's lock) when it gave up on the call.
    abandoned: bool = False


class _StepThread(threading.Thread):
    def __init__(self, pool: _Pool, number: int) -> None:
        super().__init__(name=f"step-{number}", daemon=True)
        self.pool = pool
        self.calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()

    def run(self) -> None:
        try:
            while self._serve(self.calls.get()):
                pass
        except BaseException:  # noqa: S110  # nosec B110
            # StepStopped, arriving after its call ended: the thread leaves either way.
            pass
        finally:
            try:
                connection.close()
            finally:
                self.pool.gone(self)

    def _serve(self, call: _Call) -> bool:
        """Run one call; whether the thread goes back to the pool."""
        # As Django does around each request: a connection that broke or aged is dropped.
        close_old_connections()
        try:
            call.value = call.fn()
        except BaseException as exc:
            call.error = exc
        return self.pool.returned(self, call)


class _Pool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_StepThread] = []
        self._abandoned: set[_StepThread] = set()
        self._started = 0
        self._pid: int | None = None

    def call(self, fn: Callable[[], Any], *, seconds: float) -> Any:
        """`fn()` on a step thread: its value (its exception raised here), or TIMED_OUT."""
        context = contextvars.copy_context()
        call = _Call(lambda: context.run(fn))
        thread = self._take()
        thread.calls.put(call)
        if not _wait(call, seconds):
            with self._lock:
                if not call.done.is_set():
                    call.abandoned = True
                    self._abandoned.add(thread)
                    _raise_in(thread, StepStopped)
            if call.abandoned:
                alive = self.abandoned()
                observe.report(observe.StepThreads(abandoned=alive))
                logger.warning(
                    "step call abandoned at its bound",
                    extra={
                        "action": "step_call_abandoned",
                        "step_thread": thread.name,
                        "alive": alive,
                    },
                )
                return TIMED_OUT
        if call.error is not None:
            raise call.error
        return call.value

    def returned(self, thread: _StepThread, call: _Call) -> bool:
        with self._lock:
            if call.abandoned:
                return False
            call.done.set()
            self._idle.append(thread)
            return True

    def gone(self, thread: _StepThread) -> None:
        with self._lock:
            self._abandoned.discard(thread)
        observe.report(observe.StepThreads(abandoned=self.abandoned()))

    def abandoned(self) -> int:
        """Abandoned step threads of this process still running."""
        with self._lock:
            return sum(1 for thread in self._abandoned if thread.is_alive())

    def _take(self) -> _StepThread:
        with self._lock:
            if self._pid != os.getpid():  # a forked process has none of its parent's threads
                self._pid = os.getpid()
                self._idle.clear()
                self._abandoned.clear()
            if self._idle:
                return self._idle.pop()
            self._started += 1
            thread = _StepThread(self, self._started)
        thread.start()
        return thread


def _wait(call: _Call, seconds: float) -> bool:
    """Wait for `call` at most `seconds` of clock.monotonic(); whether it ended."""
    end = clock.monotonic() + seconds
    while True:
        left = end - clock.monotonic()
        if left <= 0:
            return call.done.is_set()
        if call.done.wait(min(left, _WAIT_SLICE_SECONDS)):
            return True


def _raise_in(thread: threading.Thread, exc_type: type[BaseException]) -> None:
    """Ask `thread` to stop: `exc_type` is raised in it at its next Python instruction."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type)
        )


_pool = _Pool()

#: Test seam: calls run on the calling thread, unbounded. A test wrapped in one transaction
#: (pytest-django's `django_db`) sets it: only its own thread's connection sees its rows.
on_calling_thread = False


def call(fn: Callable[[], Any], *, seconds: float) -> Any:
    """`fn()` on a step thread, waited for at most `seconds`: its value, or TIMED_OUT."""
    if on_calling_thread:
        return fn()
    return _pool.call(fn, seconds=seconds)


def abandoned() -> int:
    """How many of this process' abandoned step threads still run."""
    return _pool.abandoned()


def overloaded() -> bool:
    """More abandoned step threads still run than settings.STEP_THREADS_MAX_ABANDONED."""
    return abandoned() > settings.STEP_THREADS_MAX_ABANDONED
