"""Cluster API's check of an upgrade plan, read from its code, as a test oracle.

A transcription of DefaultAndValidateUpgradePlans (kubernetes-sigs/cluster-api
exp/topology/desiredstate/upgrade_plan.go, at ae7ff047db): what the topology controller
does with a GenerateUpgradePlan answer before it upgrades anything. It returns the
workers' plan (defaulted when the answer left it empty) or raises `Invalid` with CAPI's
reason. Versions compare as CAPI's util/version.Compare(..., WithBuildTags()) does.
"""

from __future__ import annotations

from collections.abc import Sequence

from hooksvc.contract import semver


class Invalid(Exception):
    """CAPI would refuse the plan."""


def _v(version: semver.Version) -> str:
    return f"v{version}"


def default_and_validate(
    desired: str,
    control_plane: str,
    min_workers: str,
    control_plane_plan: Sequence[str],
    workers_plan: Sequence[str],
) -> list[str]:
    desired_v = semver.parse(desired)
    cp_v = semver.parse(control_plane)
    minors = {cp_v.minor: control_plane}
    order = {control_plane: -1}
    _control_plane(desired, desired_v, cp_v, control_plane_plan, minors=minors, order=order)
    return _workers(
        desired,
        control_plane,
        min_workers,
        control_plane_plan,
        workers_plan,
        minors=minors,
        order=order,
    )


def _control_plane(
    desired: str,
    desired_v: semver.Version,
    cp_v: semver.Version,
    control_plane_plan: Sequence[str],
    *,
    minors: dict[int, str],
    order: dict[str, int],
) -> None:
    if semver.compare(cp_v, desired_v) != 0:
        current = cp_v
        for i, target in enumerate(control_plane_plan):
            order[target] = i
            target_v = semver.parse(target)
            if semver.compare(target_v, current) in (-1, 0):
                raise Invalid(
                    f"control plane item {i}: {target} must be greater than {_v(current)}"
                )
            if current.minor not in (target_v.minor, target_v.minor - 1):
                raise Invalid(f"control plane item {i}: skips a minor with {target}")
            minors[target_v.minor] = target
            current = target_v
        if semver.compare(current, desired_v) != 0:
            raise Invalid(f"control plane plan must end with {desired}, ends with {_v(current)}")
    elif control_plane_plan:
        raise Invalid("control plane is already at the desired version")


def _workers(
    desired: str,
    control_plane: str,
    min_workers: str,
    control_plane_plan: Sequence[str],
    workers_plan: Sequence[str],
    *,
    minors: dict[int, str],
    order: dict[str, int],
) -> list[str]:
    desired_v = semver.parse(desired)
    workers_v = semver.parse(min_workers) if min_workers else None
    workers = list(workers_plan)
    if workers_v is not None and semver.compare(workers_v, desired_v) != 0:
        if control_plane_plan:
            extra = set(workers) - {*control_plane_plan, control_plane}
            if extra:
                raise Invalid(f"workers versions {sorted(extra)} are not control plane versions")
        if not workers:
            workers = _default_workers(desired, desired_v, workers_v, minors)
        current = workers_v
        for i, target in enumerate(workers):
            target_v = semver.parse(target)
            cmp = semver.compare(target_v, current)
            if cmp in (-1, 0):
                raise Invalid(f"workers item {i}: {target} must be greater than {_v(current)}")
            if cmp == semver.UNORDERED and order.get(target, -2) < order.get(_v(current), -2):
                raise Invalid(f"workers item {i}: {target} must come before {_v(current)}")
            if target_v.minor - current.minor > 3:
                raise Invalid(f"workers item {i}: {target} breaks the version skew rules")
            current = target_v
        if semver.compare(current, desired_v) != 0:
            raise Invalid(f"workers plan must end with {desired}, ends with {_v(current)}")
    elif workers:
        raise Invalid("there are no workers or workers already at the desired version")
    return workers


def _default_workers(
    desired: str, desired_v: semver.Version, workers_v: semver.Version, minors: dict[int, str]
) -> list[str]:
    """A step every third minor, then the desired version (CAPI's default)."""
    workers = []
    for i in range(desired_v.minor - workers_v.minor):
        if i > 0 and i % 3 == 0:
            if workers_v.minor + i not in minors:
                raise Invalid(f"no version for minor {workers_v.minor + i}")
            workers.append(minors[workers_v.minor + i])
    if not workers or workers[-1] != desired:
        workers.append(desired)
    return workers
