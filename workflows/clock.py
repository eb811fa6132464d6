"""The one clock of the engine, the step types and the hook path: a seam tests hold still.

Every module of workflows.engine, workflows.steps and workflows.hookpath reads the time
through this module: `now()` is wall time (what rows record), `epoch()` the same instant as
seconds since the epoch (what a step keeps in its memo, or compares with a time another
program wrote), and `monotonic()` measures how long something takes inside one process.
A test holds or moves the time everywhere at once by replacing `now` (or `monotonic`), e.g.
`monkeypatch.setattr(clock, "now", lambda: moment)`; `epoch` follows `now`.

It sits at the bottom of the layers (.importlinter) so that step types may read it too.
Worker heartbeats and a step's `progress_at` are the exceptions: they are written and
judged on the database's clock (workflows.engine.workers, workflows.engine.stalls), so that
hosts whose clocks differ agree.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

from django.utils import timezone

now: Callable[[], datetime.datetime] = timezone.now
monotonic: Callable[[], float] = time.monotonic


def epoch() -> float:
    """`now()` as seconds since the epoch (it follows a held `now`)."""
    return now().timestamp()
