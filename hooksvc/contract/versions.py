"""Kubernetes versions as Cluster API's webhook judges a Cluster's `spec.topology.version`.

kubernetes-sigs/cluster-api `core/webhooks/admission/cluster.go` (ae7ff04), `validateTopology`:
a version must start with "v" ("must start with v"), and the rest must parse as a semantic
version (blang/semver `Parse`: MAJOR.MINOR.PATCH without leading zeros, an optional
`-prerelease` and `+build`), so `v1.33` and `1.33.0` are refused. On an update,
`validateTopologyVersionUpdate` refuses a decrease ("version cannot be decreased from %q to
%q"), comparing major, minor and patch only (`util/version` `Compare` with
`WithoutPreReleases`; build tags are ignored unless asked for), and an unchanged version is
no upgrade at all. hooksvc judges the versions an operator types (`workflows preview
--upgrade-to`, `workflows rollout resume|abandon`) the same way, before they mislead.
"""

from __future__ import annotations

import re

_NUMBER = r"(?:0|[1-9][0-9]*)"
_IDENT = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
#: Semantic Versioning 2.0.0, as blang/semver's strict Parse reads it.
SEMVER = re.compile(
    rf"^({_NUMBER})\.({_NUMBER})\.({_NUMBER})"
    rf"(?:-{_IDENT}(?:\.{_IDENT})*)?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
#: MAJOR.MINOR alone, a version people often type for a release line.
_MINOR_ONLY = re.compile(rf"^v?({_NUMBER})\.({_NUMBER})$")


def problem(version: str) -> str:
    """Why Cluster API would refuse `version` as a Cluster's version ("" if it would not),
    with the version meant when that is clear."""
    if version.startswith("v") and SEMVER.match(version[1:]):
        return ""
    if SEMVER.match(version):
        return f"{version!r} must start with v, as Cluster API requires: did you mean v{version}?"
    minor = _MINOR_ONLY.match(version)
    if minor:
        needs = "a patch" if version.startswith("v") else "v and a patch"
        return (
            f"{version!r} is not a version Cluster API accepts: it needs {needs} "
            f"(e.g. v{minor[1]}.{minor[2]}.0)"
        )
    if not version.startswith("v"):
        return f"{version!r} must start with v, as Cluster API requires (e.g. v1.33.0)"
    return f"{version!r} is not a version Cluster API accepts (vMAJOR.MINOR.PATCH, e.g. v1.33.0)"


def core(version: str) -> tuple[int, int, int]:
    """Major, minor and patch of a version `problem` accepts."""
    found = SEMVER.match(version.removeprefix("v"))
    if found is None:
        raise ValueError(problem(version) or f"{version!r} is not a version")
    return int(found[1]), int(found[2]), int(found[3])


def change_problem(old: str, new: str) -> str:
    """Why Cluster API would refuse changing a Cluster's version from `old` to `new` ("" if
    it would not): a version it cannot read, or a decrease. An old version it cannot read
    is not judged (the webhook reports that as its own error)."""
    wrong = problem(new)
    if wrong or problem(old):
        return wrong
    if core(new) < core(old):
        return f"version cannot be decreased from {old} to {new}, as Cluster API refuses"
    return ""
