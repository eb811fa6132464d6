"""The engine's clock: one seam that tests and benchmarks replace instead of patching time.

Every module of the engine and the hook path reads the time through `clock.now()`, so a
test holds it still or moves it (`monkeypatch.setattr(clock, "now", ...)`) everywhere at once.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

from django.utils import timezone

now: Callable[[], datetime.datetime] = timezone.now
