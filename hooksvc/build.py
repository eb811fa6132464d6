"""What build of hooksvc this process runs: its version and commit, and the metric that says so.

The version is `hooksvc.__version__`. The commit is HOOKSVC_COMMIT, which the image sets at
build time (scripts/build-image passes `git rev-parse HEAD`), else the checkout's HEAD when
git can say it (`make run`, the tests), else "unknown". Imports nothing of the layers: the
Celery app, the web's scrape and the watcher all report `hooksvc_build_info`.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess  # nosec B404
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

import hooksvc

ROOT = Path(__file__).resolve().parent.parent


def version() -> str:
    return hooksvc.__version__


@functools.cache
def commit() -> str:
    """The commit this process was built from, asked of git once per process."""
    given = os.environ.get("HOOKSVC_COMMIT", "").strip()
    if given:
        return given
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        return "unknown"
    try:
        # A fixed argument list, no shell; bounded, as everything that waits.
        out = subprocess.run(  # noqa: S603  # nosec B603
            [git, "rev-parse", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    head = out.stdout.strip()
    return head if out.returncode == 0 and head else "unknown"


def describe() -> str:
    """One line for a person: `hooksvc 0.2.0 (commit 1a2b...)`."""
    return f"hooksvc {version()} (commit {commit()})"


class BuildInfo(Collector):
    """hooksvc_build_info{version,commit} 1: which build answers this scrape."""

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "hooksvc_build_info",
            "The hooksvc build this process runs: its version and commit (always 1).",
            labels=["version", "commit"],
        )
        family.add_metric([version(), commit()], 1)
        yield family
