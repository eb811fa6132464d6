"""`manage.py migrate` that stops on SIGTERM or SIGINT only between two migrations.

Django applies a migration inside the schema editor's transaction, but when the migration
leaves deferred SQL (the indexes and constraints the editor runs at its exit, as
auth.0001_initial does on PostgreSQL) it records the migration in django_migrations only
after that transaction has committed (django/db/migrations/executor.py,
`MigrationExecutor.apply_migration`: `if not schema_editor.deferred_sql: record_migration`
inside the `with`, else after it; `unapply_migration` always records after it). A stop in
between leaves the tables without their record, and every later migrate fails with
`relation "..." already exists`. So while a migration is applied or unapplied (the
executor's progress callback, from "apply_start" to "apply_success"), a signal is only
noted, and the command ends with 128 + the signal's number at that boundary; at any other
moment it ends at once, as `hooksvc.pid1` does. This holds whether the command is PID 1 or
not: outside a container the default action of SIGTERM would cut the same window.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

from django.core.management.commands import migrate
from django.db.migrations import Migration

from hooksvc import pid1

#: The signals that stop the command; SIGKILL at the end of a grace period still cannot wait.
SIGNALS = (signal.SIGTERM, signal.SIGINT)
_BOUNDARY_OPENS = {"apply_start", "unapply_start"}
_BOUNDARY_CLOSES = {"apply_success", "unapply_success"}


class Command(migrate.Command):
    _migrating: Migration | None = None
    _noted: int | None = None

    def handle(self, *args: Any, **options: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            # Only the main thread may set signal handlers (a call_command from a thread).
            super().handle(*args, **options)
            return
        previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
        for signum in SIGNALS:
            signal.signal(signum, self._signalled)
        try:
            super().handle(*args, **options)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _signalled(self, signum: int, frame: FrameType | None) -> None:
        if self._migrating is None:
            pid1.leave(128 + signum)
        self._noted = signum
        # os.write, not self.stderr: the handler may run in the middle of a write to it.
        name = signal.Signals(signum).name
        os.write(2, f"{name}: stopping once {self._migrating} is recorded\n".encode())

    def migration_progress_callback(
        self, action: str, migration: Any | None = None, fake: bool = False
    ) -> None:
        if action in _BOUNDARY_OPENS:
            self._migrating = migration
        super().migration_progress_callback(action, migration, fake)
        if action in _BOUNDARY_CLOSES:
            self._migrating = None
            if self._noted is not None:
                self.stdout.flush()
                pid1.leave(128 + self._noted)
