"""The engine's clocks: seams that tests and benchmarks replace instead of patching time.

Every module of the engine and the hook path reads the time through `clock.now()` (wall
time, what rows record) and measures how long something takes through `clock.monotonic()`,
so a test holds either still or moves it (`monkeypatch.setattr(clock, "now", ...)`)
everywhere at once. Worker heartbeats are the one exception: they are written and judged on
the database's clock (workflows.engine.workers), so that hosts whose clocks differ agree.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

from django.utils import timezone

now: Callable[[], datetime.datetime] = timezone.now
monotonic: Callable[[], float] = time.monotonic
