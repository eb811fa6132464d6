"""Step types are registered before any thread can look one up (issue 22).

Covers: many threads of a fresh process doing the first lookup at once all find the
built-in `approval` and a custom type, none "unknown step type" (the registry used to mark
itself loaded before it imported the step modules). A subprocess, so that the registry
really is unloaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import servers

THREADS = 16

_SCRIPT = f"""
import json, threading
import django
django.setup()
from workflows import errors
from workflows.steps import registry

barrier = threading.Barrier({THREADS})
found = []

def look_up(name):
    barrier.wait()
    try:
        found.append(registry.get(name).name)
    except errors.PermanentError as exc:
        found.append(str(exc))

threads = [
    threading.Thread(target=look_up, args=("approval" if i % 2 else "slow_import",))
    for i in range({THREADS})
]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(sorted(found)))
"""


def test_many_threads_doing_the_first_lookup_at_once_all_find_their_step_types() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "hooksvc.settings",
        "HOOKSVC_STEP_MODULES": "tests.workflows.slow_step_module",
    }
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        cwd=servers.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == ["approval"] * (THREADS // 2) + ["slow_import"] * (THREADS // 2), found
