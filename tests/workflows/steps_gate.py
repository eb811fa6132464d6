"""Two events that hold the import of tests/workflows/slow_steps.py until a test lets it go."""

from __future__ import annotations

import threading

#: Set when slow_steps' import has begun (the registry is loading).
importing = threading.Event()
#: Set by the test to let that import finish.
release = threading.Event()
