"""The record of hook calls: kept for every answered call, shown in the admin, pruned by beat.

The record is a best-effort audit trail, not state: nothing reads it to answer a hook. So
a call only appends it to this process' buffer, and a background thread writes the buffer
every HOOK_CALL_FLUSH_SECONDS in one COPY (a per-call INSERT and commit was a third of
a hook call's time). The buffer is written when the gunicorn worker exits; a killed process
loses at most its last interval of records, and while PostgreSQL is down records beyond
MAX_BUFFERED are dropped (and counted in the log), never the answer. With
HOOK_CALL_FLUSH_SECONDS = 0 each call writes its record before it answers (tests).
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction

from hooksvc.contract import wire
from workflows import clock
from workflows.engine import sql
from workflows.hookpath import selection
from workflows.models import HookCall

logger = logging.getLogger(__name__)

#: At most this many records wait for the next write; more are dropped while it fails.
MAX_BUFFERED = 50_000

_lock = threading.Lock()
_buffer: list[HookCall] = []
_dropped = 0
#: The process whose flusher thread runs: a forked worker starts its own.
_flusher_pid: int | None = None
#: Test seam: False leaves writing the buffer to explicit `flush()` calls.
background = True


def record(
    *,
    call: wire.HookCall,
    handler: str,
    status: str,
    message: str,
    retry_after: int | None,
    latency_ms: float,
) -> None:
    """Keep one row for the admin: buffered, or written now when flushing is off."""
    record_row(
        hook=call.hook.name,
        handler=handler,
        cluster_key=call.cluster.key,
        cluster_namespace=call.cluster.namespace,
        cluster_name=call.cluster.name,
        moment=selection.moment_key(call),
        status=status,
        message=message,
        retry_after=retry_after,
        latency_ms=latency_ms,
    )


def record_row(
    *,
    hook: str,
    handler: str,
    cluster_key: str,
    cluster_namespace: str,
    cluster_name: str,
    moment: str,
    status: str,
    message: str,
    retry_after: int | None,
    latency_ms: float,
) -> None:
    """`record` for any hook: the optional hooks name a Machine's cluster and moment."""
    global _dropped
    row = HookCall(
        # The time of the call, not of the write.
        at=clock.now(),
        hook=hook,
        handler=handler,
        cluster_key=cluster_key[:320],
        cluster_namespace=cluster_namespace,
        cluster_name=cluster_name,
        moment=moment[:200],
        status=status,
        retry_after=retry_after,
        message=message[:1000],
        latency_ms=latency_ms,
    )
    if settings.HOOK_CALL_FLUSH_SECONDS <= 0:
        _write([row])
        return
    with _lock:
        if len(_buffer) < MAX_BUFFERED:
            _buffer.append(row)
        else:
            _dropped += 1
    if background and _flusher_pid != os.getpid():
        _start_flusher()


def flush() -> int:
    """Write what is buffered now; the number of rows written (0 if the write failed)."""
    global _dropped
    with _lock:
        rows = _buffer[:]
        _buffer.clear()
        dropped, _dropped = _dropped, 0
    if dropped:
        logger.warning(
            "hook call records dropped while the state store was unavailable",
            extra={"action": "hook_records_dropped", "count": dropped},
        )
    if not rows:
        return 0
    try:
        _write(rows)
    except (OperationalError, InterfaceError):
        logger.warning(
            "hook call records not written; kept for the next write",
            extra={"action": "hook_record_failed", "count": len(rows)},
            exc_info=True,
        )
        # A broken connection is not reused: the next flush opens a new one (as Django
        # does after a request; never inside a transaction, which is its caller's).
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()
        with _lock:
            # Kept for the next flush, oldest first, within the bound.
            keep = max(0, MAX_BUFFERED - len(_buffer))
            _buffer[:0] = rows[:keep]
            _dropped += len(rows) - len(rows[:keep])
        return 0
    except DatabaseError:
        # The rows themselves are refused (wire.py should have prevented it): retrying
        # them would fail for ever.
        logger.warning(
            "hook call records refused by the state store; dropped",
            extra={"action": "hook_record_failed", "count": len(rows)},
            exc_info=True,
        )
        return 0
    return len(rows)


def _write(rows: list[HookCall]) -> None:
    """One COPY (a fifth of bulk_create's CPU per row) whose commit does not wait for the
    disk (asynchronous commit, this transaction only): a crash may lose the last records,
    never a run."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql.QUERIES["asynchronous_commit"])
        with cursor.copy(sql.COPY_HOOK_CALLS) as copy:
            for row in rows:
                copy.write_row([getattr(row, column) for column in sql.HOOK_CALL_COLUMNS])


def _start_flusher() -> None:
    global _flusher_pid
    with _lock:
        if _flusher_pid == os.getpid():
            return
        _flusher_pid = os.getpid()
    threading.Thread(target=_flush_forever, name="hook-call-records", daemon=True).start()


def _flush_forever() -> None:
    while True:
        time.sleep(settings.HOOK_CALL_FLUSH_SECONDS)
        try:
            flush()
        except Exception:  # the thread must outlive any surprise; the next interval retries
            logger.exception("hook call flusher failed", extra={"action": "hook_record_failed"})


def prune(batch: int = 10_000) -> int:
    """Delete calls older than the retention, in batches so that no lock is held for long."""
    cutoff = clock.now() - datetime.timedelta(days=settings.HOOK_CALL_RETENTION_DAYS)
    deleted = 0
    while True:
        ids = list(HookCall.objects.filter(at__lt=cutoff).values_list("pk", flat=True)[:batch])
        if not ids:
            return deleted
        deleted += HookCall.objects.filter(pk__in=ids).delete()[0]
