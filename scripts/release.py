#!/usr/bin/env python3
"""Cuts a release of hooksvc, and checks that every copy of the version is the one place's.

The version is written once, `__version__` in hooksvc/__init__.py; PLACES lists every file
that repeats it (the chart, the prod overlay's image tag, clusterctl's files and docs...).

    scripts/release.py prepare X.Y.Z   # make release VERSION=X.Y.Z: sets X.Y.Z everywhere and
                                    # makes CHANGELOG.md's "Unreleased" the X.Y.Z section
    scripts/release.py record          # make release-record, once the release commit is made:
                                    # adds HEAD to releases.json
    scripts/release.py check           # exit 1 naming each copy that is not __version__
    scripts/release.py version         # __version__
    scripts/release.py previous        # the commit of the release this checkout upgrades from

docs/releasing.md walks through a release. Run with any Python 3.11 (no dependency but the
standard library; clusterctl's files are regenerated with scripts/clusterctl-files).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RELEASES = "releases.json"
CHANGELOG = "CHANGELOG.md"
UNRELEASED = "## [Unreleased]"
#: Semantic versioning's release versions (no pre-release or build part: a release is cut
#: from main, and an image tag or chart version carries it as it is).
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
_VERSION = r"(\d+\.\d+\.\d+)"


@dataclasses.dataclass(frozen=True)
class Place:
    """A file that repeats the version: each match of `pattern` holds it in its one group."""

    path: str
    pattern: str

    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.MULTILINE)


PLACES = (
    Place("hooksvc/__init__.py", rf'^__version__ = "{_VERSION}"$'),
    Place("pyproject.toml", rf'^version = "{_VERSION}"$'),
    Place("charts/hooksvc/Chart.yaml", rf"^version: {_VERSION}$"),
    Place("charts/hooksvc/Chart.yaml", rf'^appVersion: "{_VERSION}"$'),
    # The prod overlay installs this release's image, and the chart's test value sets name it.
    Place("k8s/overlays/prod/kustomization.yaml", rf'^    newTag: "{_VERSION}"$'),
    Place("charts/hooksvc/ci/prod-values.yaml", rf'^  tag: "{_VERSION}"$'),
    Place("charts/hooksvc/ci/components-values.yaml", rf'^  tag: "{_VERSION}"$'),
    Place("charts/hooksvc/ci/bring-your-own-values.yaml", rf'^  tag: "{_VERSION}"$'),
    # clusterctl's files: the image tag's default (metadata.yaml's series come from
    # releases.json and the chart; scripts/clusterctl-files --check holds both).
    Place("clusterctl/runtime-extension-components.yaml", rf"HOOKSVC_IMAGE_TAG:={_VERSION}\}}"),
    Place("docs/clusterctl.md", rf"\| `HOOKSVC_IMAGE_TAG` \| `{_VERSION}` \|"),
    Place("docs/clusterctl.md", rf"(?:hooksvc/|init --runtime-extension hooksvc:)v{_VERSION}\b"),
    Place("docs/deploy.md", rf"--runtime-extension hooksvc:v{_VERSION}\b"),
)


class ReleaseError(Exception):
    """A release step that cannot be done, with the sentence that says why."""


def _read(root: Path, path: str) -> str:
    return (root / path).read_text(encoding="utf-8")


def version(root: Path = ROOT) -> str:
    found = PLACES[0].regex().findall(_read(root, PLACES[0].path))
    if len(found) != 1:
        raise ReleaseError(f"{PLACES[0].path} must set __version__ once, as X.Y.Z")
    return str(found[0])


def releases(root: Path = ROOT) -> list[dict[str, str]]:
    records: list[dict[str, str]] = json.loads(_read(root, RELEASES))
    return records


def previous_release(root: Path = ROOT) -> dict[str, str]:
    """The release this checkout upgrades from, which every check of "the previous release"
    reads: the newest recorded one whose code the checkout changes. At a release itself
    (nothing but releases.json changed since its commit) that is the release before it, so
    that a release is checked against its predecessor, not against itself."""
    records = releases(root)
    if not records:
        raise ReleaseError(f"{RELEASES} records no release")
    for record in reversed(records[1:]):
        # Exit 0: no difference in the tracked files but the record (work tree included).
        same = subprocess.run(  # noqa: S603
            ["git", "diff", "--quiet", record["commit"], "--", ".", f":(exclude){RELEASES}"],  # noqa: S607
            cwd=root,
            capture_output=True,
            timeout=60,
            check=False,
        )
        if same.returncode != 0:
            return record
    return records[0]


def previous(root: Path = ROOT) -> str:
    """The previous release's commit (previous_release)."""
    return previous_release(root)["commit"]


def check(root: Path = ROOT) -> list[str]:
    """Each copy of the version that is not __version__, as a sentence; empty: all agree."""
    want = version(root)
    problems = []
    for place in PLACES:
        found = place.regex().findall(_read(root, place.path))
        if not found:
            problems.append(f"{place.path}: no version where {place.pattern!r} expects one")
        problems += [
            f"{place.path}: {got} where __version__ is {want}" for got in found if got != want
        ]
    return problems


def _key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _changelog_section(text: str, new: str, today: str) -> str:
    start = text.find(UNRELEASED)
    if start < 0:
        raise ReleaseError(f'{CHANGELOG} has no "{UNRELEASED}" section')
    body_start = start + len(UNRELEASED)
    following = text.find("\n## ", body_start)
    body = text[body_start : following if following >= 0 else len(text)]
    if not re.search(r"^- ", body, flags=re.MULTILINE):
        raise ReleaseError(f'{CHANGELOG}: "Unreleased" lists no change; nothing to release')
    if "### Upgrading" not in body:
        raise ReleaseError(
            f'{CHANGELOG}: "Unreleased" has no "### Upgrading" note (what an operator does '
            "or sees when moving to this release; say so even when it is nothing)"
        )
    heading = f"{UNRELEASED}\n\n## [{new}] - {today}"
    return text[:start] + heading + text[body_start:]


def prepare(new: str, root: Path = ROOT, today: str | None = None) -> None:
    """Sets `new` everywhere and moves "Unreleased" into its section (uncommitted)."""
    if not SEMVER.match(new):
        raise ReleaseError(f"VERSION={new!r} is not a release version X.Y.Z (semantic versioning)")
    current = version(root)
    if _key(new) <= _key(current):
        raise ReleaseError(f"VERSION={new} is not after the current version {current}")
    if any(r["version"] == new for r in releases(root)):
        raise ReleaseError(f"{new} is released already ({RELEASES})")
    stale = check(root)
    if stale:
        raise ReleaseError("the copies disagree before the release:\n  " + "\n  ".join(stale))
    today = today or datetime.datetime.now(datetime.UTC).date().isoformat()
    changelog = _changelog_section(_read(root, CHANGELOG), new, today)
    edits: dict[str, str] = {}
    for place in PLACES:
        text = edits.get(place.path, _read(root, place.path))
        edits[place.path] = place.regex().sub(lambda m: m.group(0).replace(m.group(1), new), text)
    edits[CHANGELOG] = changelog
    for path, text in edits.items():
        (root / path).write_text(text, encoding="utf-8")
    # metadata.yaml gains the new series (it reads the chart's appVersion).
    subprocess.run(  # noqa: S603
        [sys.executable, str(root / "scripts" / "clusterctl-files"), "--write", "clusterctl"],
        cwd=root,
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )


def _git(root: Path, *args: str) -> str:
    return subprocess.run(  # noqa: S603
        ["git", *args],  # noqa: S607
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()


def record(root: Path = ROOT, today: str | None = None) -> dict[str, str]:
    """Adds HEAD, the release commit of __version__, to releases.json (uncommitted)."""
    current = version(root)
    records = releases(root)
    if any(r["version"] == current for r in records):
        raise ReleaseError(f"{current} is recorded already ({RELEASES}); run `make release` first")
    if _git(root, "status", "--porcelain", "--untracked-files=no"):
        raise ReleaseError("the work tree has uncommitted changes: commit the release first")
    head = _git(root, "rev-parse", "HEAD")
    if f"## [{current}] - " not in _git(root, "show", f"{head}:{CHANGELOG}"):
        raise ReleaseError(f"HEAD's {CHANGELOG} has no {current} section: is HEAD the release?")
    today = today or datetime.datetime.now(datetime.UTC).date().isoformat()
    entry = {"version": current, "commit": head, "date": today}
    records.append(entry)
    # One release a line: the first line is the file as it began, later ones diff alone.
    lines = ",\n ".join(json.dumps(r) for r in records)
    (root / RELEASES).write_text(f"[{lines}]\n", encoding="utf-8")
    return entry


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare").add_argument("version", metavar="X.Y.Z")
    for name in ("record", "check", "version", "previous"):
        sub.add_parser(name)
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            prepare(args.version)
            print(f"hooksvc {args.version}: review `git diff`, commit, then `make release-record`")
        elif args.command == "record":
            entry = record()
            print(f"recorded {entry['version']} at {entry['commit']}: commit {RELEASES}")
        elif args.command == "check":
            problems = check()
            for problem in problems:
                print(f"release: {problem}", file=sys.stderr)
            return 1 if problems else 0
        elif args.command == "version":
            print(version())
        else:
            print(previous())
    except ReleaseError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
