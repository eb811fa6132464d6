"""The previous release, for the rolling-upgrade test: its commit and its tree.

`releases.json` at the repository's root records every release's commit (docs/releasing.md);
`previous` is the release this checkout upgrades from. Its tree comes from git itself
(`git archive`), so a clone with history needs no network.

It runs with this checkout's virtualenv rather than one built from its own requirements:
a release's requirements/constraints.txt pins every package it installs, transitive ones
included. When each package its processes import (requirements/base.txt and what those
require, by the installed packages' own metadata) is installed here at the version it pinned,
the old code imports exactly what it was released with; packages added since are there too,
unused by it. `foreign_pins` says which differ; the test refuses to run the old code then.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
import runpy
import subprocess
import tarfile
import tempfile
from pathlib import Path

from packaging.requirements import Requirement

from tests.support import servers

RECORD = servers.ROOT / "releases.json"


@dataclasses.dataclass(frozen=True)
class Release:
    version: str
    commit: str


def previous() -> Release:
    """The release this checkout upgrades from (scripts/release.py previous_release: the
    newest recorded one whose code differs from this checkout's)."""
    script = runpy.run_path(str(servers.ROOT / "scripts" / "release.py"))
    record = script["previous_release"](servers.ROOT)
    return Release(record["version"], record["commit"])


def extract(release: Release, dest: Path) -> Path:
    """The release's tree, from this clone's history, in `dest`."""
    known = subprocess.run(
        ["git", "cat-file", "-e", f"{release.commit}^{{commit}}"],
        cwd=servers.ROOT,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert known.returncode == 0, (
        f"release {release.version} ({release.commit}) is not in this clone's history: "
        "a shallow clone? `git fetch --unshallow` (CI clones with history)"
    )
    with tempfile.TemporaryFile() as archive:
        subprocess.run(
            ["git", "archive", "--format=tar", release.commit],
            cwd=servers.ROOT,
            stdout=archive,
            check=True,
            timeout=120,
        )
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            tar.extractall(dest, filter="data")
    return dest


_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)")


def pins(constraints: str) -> dict[str, str]:
    """name (normalised) -> version, of a constraints file's `name==version` lines."""
    found = {}
    for line in constraints.splitlines():
        match = _PIN.match(line.strip())
        if match:
            found[_normalise(match[1])] = match[2]
    return found


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _runtime(tree: Path) -> set[str]:
    """requirements/base.txt's packages and everything they require, transitively."""
    todo = [
        _normalise(Requirement(line).name)
        for raw in (tree / "requirements" / "base.txt").read_text().splitlines()
        if (line := raw.split("#", 1)[0].strip()) and not line.startswith("-")
    ]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed: foreign_pins reports it
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(_normalise(requirement.name))
    return seen


def foreign_pins(tree: Path) -> list[str]:
    """The old release's runtime pins this virtualenv does not have at that version."""
    wanted = pins((tree / "requirements" / "constraints.txt").read_text())
    installed = {
        _normalise(dist.metadata["Name"]): dist.version
        for dist in importlib.metadata.distributions()
    }
    return sorted(
        f"{name}=={wanted[name]} (installed: {installed.get(name, 'none')})"
        for name in _runtime(tree)
        if name in wanted and installed.get(name) != wanted[name]
    )
