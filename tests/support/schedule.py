"""`--dist loadfile`, longest files first: how `make test` spreads the suite's files.

pytest-xdist's loadfile hands out whole files (a module's image, server or database is made
once) in the order of how many tests each holds. A file with few but long tests (the image's,
the fault injections) then starts last and sets the run's tail while the other processes
idle. This scheduler keeps loadfile's units and hands them out longest first, by the seconds
each file took in a recorded run (tests/durations.json; a file not in it counts
DEFAULT_TEST_SECONDS a test): the classic longest-processing-time-first rule, whose tail is
at most the longest file. Only the order changes: each file still runs whole in one process.

Refresh the record after the suite's shape changes (it only affects how soon the run ends):
  make pytest PYTEST_ARGS=--junitxml=var/junit.xml
  .venv/bin/python -m tests.support.schedule var/junit.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

ROOT = Path(__file__).resolve().parents[2]
DURATIONS = ROOT / "tests" / "durations.json"
#: About the suite's mean (2,086 tests in 2,294 s of one recorded run).
DEFAULT_TEST_SECONDS = 1.0


def recorded() -> dict[str, float]:
    """Seconds per test file (path from the repository's root) of the recorded run."""
    try:
        data: dict[str, float] = json.loads(DURATIONS.read_text())
    except FileNotFoundError:
        return {}
    return data


class LongestFileFirst(LoadFileScheduling):  # type: ignore[misc]  # xdist has no types
    """loadfile's units (one per file), queued by their recorded seconds, longest first."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self.seconds = recorded()

    def expected(self, scope: str, tests: int) -> float:
        return self.seconds.get(scope, DEFAULT_TEST_SECONDS * tests)

    def schedule(self) -> None:
        # loadfile fills its queue once, on the first call, assigning each file's unit in
        # the order of their numbers of tests (pytest-xdist 3.8, scheduler/loadscope.py);
        # a key already queued keeps its place, so queue them first, in this order.
        if self.collection is None and self._check_nodes_have_same_collection():
            units: dict[str, dict[str, bool]] = {}
            for nodeid in next(iter(self.registered_collections.values())):
                units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
            order = sorted(units, key=lambda s: self.expected(s, len(units[s])), reverse=True)
            self.workqueue = OrderedDict((scope, units[scope]) for scope in order)
        super().schedule()


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadFileScheduling | None:
    if config.getvalue("dist") != "loadfile":
        return None
    return LongestFileFirst(config, log)


def file_of(classname: str) -> str | None:
    """The test file of a JUnit XML classname (`tests.hooks.test_https` or a class in it)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = Path(*parts[:end]).with_suffix(".py")
        if (ROOT / path).is_file():
            return path.as_posix()
    return None


def from_junit(report: Path) -> dict[str, float]:
    """Seconds per test file in a pytest JUnit XML report (setup, call and teardown)."""
    seconds: dict[str, float] = {}
    for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314 (our own report)
        path = file_of(case.get("classname", ""))
        if path is not None:
            seconds[path] = seconds.get(path, 0.0) + float(case.get("time", 0))
    return {path: round(s, 1) for path, s in sorted(seconds.items())}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m tests.support.schedule JUNIT_XML")
    DURATIONS.write_text(json.dumps(from_junit(Path(sys.argv[1])), indent=1) + "\n")
