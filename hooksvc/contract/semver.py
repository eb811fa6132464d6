"""Kubernetes versions as Cluster API reads them: blang/semver's ParseTolerant and CAPI's
`util/version.Compare(..., WithBuildTags())`.

ParseTolerant (github.com/blang/semver/v4, semver.go) trims spaces and a leading "v" and
pads "1.30" to "1.30.0"; Compare orders by major, minor, patch and pre-release (SemVer 2.0),
and with build tags compares those too: numbers numerically, a number before a word, and
two different words are `UNORDERED` (2), since a build tag may be a commit hash.
"""

from __future__ import annotations

import dataclasses
import re

#: Compare's answer for versions that differ only in build tags that cannot be ordered.
UNORDERED = 2

_VERSION = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


class VersionError(ValueError):
    """Not a version ParseTolerant accepts."""


@dataclasses.dataclass(frozen=True, order=False)
class Version:
    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(self.pre)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    @property
    def v(self) -> str:
        """As Kubernetes writes it: with a leading "v"."""
        return f"v{self}"


def parse(text: str) -> Version:
    """ParseTolerant: " v1.30 " is 1.30.0; raises VersionError naming the text."""
    value = text.strip().removeprefix("v")
    core, sep, rest = _split_core(value)
    parts = core.split(".")
    if 0 < len(parts) < 3 and all(parts):
        core = ".".join(parts + ["0"] * (3 - len(parts)))
    match = _VERSION.match(core + sep + rest)
    if match is None:
        raise VersionError(f"{text[:64]!r} is not a version (vMAJOR.MINOR.PATCH)")
    major, minor, patch, pre, build = match.groups()
    return Version(
        int(major),
        int(minor),
        int(patch),
        tuple(pre.split(".")) if pre else (),
        tuple(build.split(".")) if build else (),
    )


def _split_core(value: str) -> tuple[str, str, str]:
    for i, char in enumerate(value):
        if char in "-+":
            return value[:i], char, value[i + 1 :]
    return value, "", ""


def _compare_pre(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    # SemVer 2.0 §11: a version without pre-release ranks above one with.
    if not a or not b:
        return (len(a) == 0) - (len(b) == 0)
    for x, y in zip(a, b, strict=False):
        if x == y:
            continue
        if x.isdigit() and y.isdigit():
            return -1 if int(x) < int(y) else 1
        if x.isdigit() != y.isdigit():
            return -1 if x.isdigit() else 1
        return -1 if x < y else 1
    return (len(a) > len(b)) - (len(a) < len(b))


def _compare_build(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    # CAPI util/version buildIdentifiers.compare: identifier by identifier, then length.
    for x, y in zip(a, b, strict=False):
        if x.isdigit() and y.isdigit():
            if int(x) != int(y):
                return -1 if int(x) < int(y) else 1
        elif x.isdigit() != y.isdigit():
            return -1 if x.isdigit() else 1
        elif x != y:
            return UNORDERED
    return (len(a) > len(b)) - (len(a) < len(b))


def compare(a: Version, b: Version, *, build_tags: bool = True) -> int:
    """-1, 0, 1, or UNORDERED (build tags that cannot be ordered)."""
    core = (a.major, a.minor, a.patch)
    other = (b.major, b.minor, b.patch)
    if core != other:
        return -1 if core < other else 1
    pre = _compare_pre(a.pre, b.pre)
    if pre or not build_tags:
        return pre
    return _compare_build(a.build, b.build)
