"""Releases: one version, shown everywhere it should be; `make release` and its record.

The version is written once (`hooksvc.__version__`); scripts/release.py lists every file that
repeats it, sets them all when a release is cut, and checks them. These tests hold the
repository to it, show each place a person or CAPI reads the version (the CLI, the
metric, the image's labels, the chart, clusterctl's metadata), and cut a release in a copy
of the repository, as the coordinator will with `make release`.
"""

from __future__ import annotations

import json
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client
from prometheus_client import generate_latest

import hooksvc
from hooksvc import build

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "release.py"
#: Files a release reads or writes, beyond those its PLACES list: copied into a scratch repo.
RELEASE_FILES = ("CHANGELOG.md", "releases.json", "scripts/release.py", "scripts/clusterctl-files")


def release() -> dict[str, Any]:
    return runpy.run_path(str(SCRIPT))


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def test_every_copy_of_the_version_is_hooksvc_version() -> None:
    assert release()["check"]() == []
    assert release()["version"]() == hooksvc.__version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'\nversion = "{hooksvc.__version__}"\n' in pyproject
    chart = yaml.safe_load((ROOT / "charts" / "hooksvc" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (hooksvc.__version__,) * 2


def test_clusterctl_metadata_has_this_versions_series_and_every_releases() -> None:
    """clusterctl looks up the release series of the version it installs
    (cmd/clusterctl/client/cluster/installer.go, getProviderContract: an error when none
    matches), so metadata.yaml lists this version's and every recorded release's."""
    meta = yaml.safe_load((ROOT / "clusterctl" / "metadata.yaml").read_text())
    series = {(s["major"], s["minor"]) for s in meta["releaseSeries"]}
    versions = [hooksvc.__version__, *(r["version"] for r in release()["releases"]())]
    assert {tuple(int(p) for p in v.split(".")[:2]) for v in versions} <= series


def _git_changed(commit: str) -> bool:
    """Whether this checkout's tracked files differ from `commit`'s, releases.json aside."""
    changed = subprocess.run(
        ["git", "diff", "--quiet", commit, "--", ".", ":(exclude)releases.json"],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return changed.returncode != 0


def test_releases_json_records_the_previous_release_commit_in_this_history() -> None:
    records = json.loads((ROOT / "releases.json").read_text())
    assert records[0] == {
        "version": "0.1.0",
        "commit": "e385ce13658bce1f3489c3e582926e321f0657e3",
        "date": "2026-11-24",
    }
    for record in records:
        # A clean clone can check each release out: its commit is an ancestor of HEAD.
        _git("merge-base", "--is-ancestor", record["commit"], "HEAD")
    # What the checks read: the newest release, or at a release itself the one before it.
    code_since_newest = _git_changed(records[-1]["commit"])
    expected = records[-1] if code_since_newest or len(records) == 1 else records[-2]
    assert release()["previous"]() == expected["commit"]


def test_the_changelog_has_unreleased_and_an_upgrading_note_per_release() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    sections = text.split("\n## ")[1:]
    assert sections[0].startswith("[Unreleased]")
    released = [s.split("\n", 1)[0] for s in sections[1:]]
    assert released[-1] == "[0.1.0] - 2026-11-24"
    records = json.loads((ROOT / "releases.json").read_text())
    assert {r.split("]")[0].lstrip("[") for r in released} == {r["version"] for r in records}
    # Each release says what upgrading to it means; so does "Unreleased" once it lists a
    # change (`make release` refuses it otherwise; right after a release it is empty).
    for section in sections:
        if section.startswith("[Unreleased]") and "\n- " not in section:
            continue
        assert "\n### Upgrading\n" in section, section.split("\n", 1)[0]


@pytest.mark.parametrize("args", [["version"], ["--version"], ["workflows", "--version"]])
def test_manage_py_says_hooksvcs_version_and_commit(args: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert out == f"hooksvc {hooksvc.__version__} (commit {_git('rev-parse', 'HEAD')})\n"


def test_make_version_prints_the_version_alone() -> None:
    out = subprocess.run(
        ["make", "-s", "version"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert out == f"{hooksvc.__version__}\n"


def test_the_image_commit_comes_from_its_build(monkeypatch: pytest.MonkeyPatch) -> None:
    build.commit.cache_clear()
    monkeypatch.setenv("HOOKSVC_COMMIT", "0123abc")
    try:
        assert build.describe() == f"hooksvc {hooksvc.__version__} (commit 0123abc)"
    finally:
        build.commit.cache_clear()


@pytest.mark.django_db
def test_the_webs_metrics_say_which_build_answers(client: Client) -> None:
    text = client.get("/metrics").content.decode()
    line = f'hooksvc_build_info{{commit="{build.commit()}",version="{hooksvc.__version__}"}} 1.0'
    assert line in text.splitlines()


def test_the_watchers_metrics_say_which_build_answers() -> None:
    from workflows.controllers import watcher

    text = generate_latest(watcher._REGISTRY).decode()
    assert f'version="{hooksvc.__version__}"' in text
    assert "hooksvc_build_info{" in text


def _fake_engine(tmp_path: Path) -> Path:
    engine = tmp_path / "engine"
    engine.write_text('#!/bin/sh\necho "$@"\n')
    engine.chmod(0o755)
    return engine


def test_the_image_is_labelled_with_the_version_and_commit(tmp_path: Path) -> None:
    """The Dockerfile's OCI labels (image-spec annotations.md: org.opencontainers.image.
    version, .revision) take the build arguments scripts/build-image passes."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'org.opencontainers.image.version="${HOOKSVC_VERSION}"' in dockerfile
    assert 'org.opencontainers.image.revision="${HOOKSVC_COMMIT}"' in dockerfile
    assert "ENV HOOKSVC_COMMIT=${HOOKSVC_COMMIT}" in dockerfile
    env = {"PATH": "/usr/bin:/bin", "CONTAINER_ENGINE": str(_fake_engine(tmp_path))}
    name = f"registry.example.com/hooksvc:{hooksvc.__version__}"
    out = subprocess.run(
        [str(ROOT / "scripts" / "build-image"), name],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert out[out.index("--tag") + 1] == name
    assert f"HOOKSVC_VERSION={hooksvc.__version__}" in out
    commits = [a.split("=", 1)[1] for a in out if a.startswith("HOOKSVC_COMMIT=")]
    assert commits[0].removesuffix("-dirty") == _git("rev-parse", "HEAD")


def test_an_image_tag_that_names_another_version_is_refused(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "CONTAINER_ENGINE": str(_fake_engine(tmp_path))}
    result = subprocess.run(
        [str(ROOT / "scripts" / "build-image"), "registry.example.com/hooksvc:99.0.0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"the tag 99.0.0 is a version, but this checkout is hooksvc {hooksvc.__version__}" in (
        result.stderr
    )
    assert result.stdout == ""


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A git repository holding what a release reads and writes, as the repository has it."""
    copy = tmp_path / "repo"
    paths = {p.path for p in release()["PLACES"]} | set(RELEASE_FILES)
    for path in sorted(paths):
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, copy / path)
    shutil.copytree(ROOT / "charts", copy / "charts", dirs_exist_ok=True)
    # Something to release, whatever "Unreleased" holds now (right after a release: nothing).
    changelog = copy / "CHANGELOG.md"
    text = changelog.read_text()
    start = text.index("## [Unreleased]")
    end = text.index("\n## [", start + 1)
    unreleased = (
        "## [Unreleased]\n\n### Upgrading\n\n- Nothing to do.\n\n### Added\n\n- A change.\n"
    )
    changelog.write_text(text[:start] + unreleased + text[end:])
    _git("init", "-q", cwd=copy)
    _git("add", "-A", cwd=copy)
    _git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "main", cwd=copy)
    return copy


def _next_minor() -> str:
    major, minor, _ = (int(p) for p in hooksvc.__version__.split("."))
    return f"{major}.{minor + 1}.0"


def test_a_release_sets_every_copy_and_records_its_commit(scratch: Path) -> None:
    script = release()
    new = _next_minor()
    before = (scratch / "releases.json").read_text()
    script["prepare"](new, root=scratch, today="2027-01-02")
    assert script["version"](scratch) == new
    assert script["check"](scratch) == []
    changelog = (scratch / "CHANGELOG.md").read_text()
    assert f"## [Unreleased]\n\n## [{new}] - 2027-01-02\n\n### Upgrading\n" in changelog
    meta = yaml.safe_load((scratch / "clusterctl" / "metadata.yaml").read_text())
    assert {"major": 0, "minor": int(new.split(".")[1]), "contract": "v1beta2"} in meta[
        "releaseSeries"
    ]
    with pytest.raises(script["ReleaseError"], match="uncommitted changes"):
        script["record"](scratch)
    _git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qam", f"{new}", cwd=scratch)
    head = _git("rev-parse", "HEAD", cwd=scratch)
    entry = script["record"](scratch, today="2027-01-02")
    assert entry == {"version": new, "commit": head, "date": "2027-01-02"}
    text = (scratch / "releases.json").read_text()
    # The earlier releases' line stays as it was: the record only adds a line.
    assert text.startswith(before.rstrip("\n").removesuffix("]") + ",\n ")
    assert json.loads(text)[-1] == entry
    # At the release itself the checks read the release before it, not the release...
    assert script["previous"](scratch) == json.loads(before)[-1]["commit"]
    # ... and once main's code moves on, the release.
    (scratch / "CHANGELOG.md").write_text((scratch / "CHANGELOG.md").read_text() + "\n")
    assert script["previous"](scratch) == head
    with pytest.raises(script["ReleaseError"], match="recorded already"):
        script["record"](scratch)


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("1.2", "is not a release version X.Y.Z"),
        ("0.3.0-rc.1", "is not a release version X.Y.Z"),
        ("0.0.9", "is not after the current version"),
    ],
)
def test_a_release_refuses_a_version_it_cannot_cut(
    scratch: Path, version: str, message: str
) -> None:
    script = release()
    with pytest.raises(script["ReleaseError"], match=message):
        script["prepare"](version, root=scratch)
    assert _git("status", "--porcelain", cwd=scratch) == ""


def test_a_release_with_nothing_under_unreleased_is_refused(scratch: Path) -> None:
    script = release()
    path = scratch / "CHANGELOG.md"
    text = path.read_text()
    start = text.index("## [Unreleased]")
    end = text.index("\n## [", start + 1)
    path.write_text(text[:start] + "## [Unreleased]\n" + text[end:])
    with pytest.raises(script["ReleaseError"], match="lists no change"):
        script["prepare"](_next_minor(), root=scratch)


def test_make_release_without_a_version_says_how() -> None:
    result = subprocess.run(
        ["make", "-s", "release"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "make release VERSION=x.y.z" in result.stderr
