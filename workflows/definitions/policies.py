"""In-place and upgrade policies: validated documents, and the typed views the hooks read.

`InPlacePolicy`: which changes of a Machine (or MachineSet) hooksvc handles in place, by
field path of the Machine spec, the bootstrap config spec and the infrastructure machine
spec, for the Machines a label selector picks (CanUpdateMachine, CanUpdateMachineSet).
`UpgradePolicy`: the versions a multi-minor upgrade may go through, for the clusters a
selector picks (GenerateUpgradePlan). Both are stored in `Policy` rows, written by
apply_workflows, the admin and the resource controller like templates; the hooks read them
(`in_place_policies`, `upgrade_policies`) and write nothing.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Mapping
from typing import Any

from hooksvc.contract import semver
from workflows.definitions import fields
from workflows.policy_model import Policy

IN_PLACE = "InPlacePolicy"
UPGRADE = "UpgradePolicy"
#: Kubernetes LabelSelector operators (apimachinery pkg/apis/meta/v1 types.go).
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
#: How workers follow the control plane: the fewest steps Kubernetes' skew allows
#: (what CAPI computes when the plan leaves workers empty), or every control plane step.
WORKERS = ("Minimal", "EveryMinor")
_PATH = re.compile(r"^spec(\.[A-Za-z0-9_-]+)*$")
_MINOR = re.compile(r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)$")
#: Lists longer than this are typos, not policies.
MAX_ITEMS = 200


@dataclasses.dataclass(frozen=True)
class Expression:
    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        if self.operator == "In":
            return has and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not has or labels[self.key] not in self.values
        return has if self.operator == "Exists" else not has


@dataclasses.dataclass(frozen=True)
class LabelSelector:
    """A Kubernetes LabelSelector: matchLabels and matchExpressions, ANDed; empty matches all."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Expression, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            e.matches(labels) for e in self.expressions
        )


def _selector(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    raw = fields.mapping(value, where, ("matchLabels", "matchExpressions"))
    out: dict[str, Any] = {}
    if "matchLabels" in raw:
        out["matchLabels"] = fields.string_map(raw["matchLabels"], f"{where}.matchLabels")
    if "matchExpressions" in raw:
        given = raw["matchExpressions"]
        if not isinstance(given, list):
            raise fields.FieldError(f"{where}.matchExpressions", "must be a list")
        expressions = []
        for i, item in enumerate(given):
            at = f"{where}.matchExpressions[{i}]"
            expr = fields.mapping(item, at, ("key", "operator", "values"), ("key", "operator"))
            operator = fields.choice(expr["operator"], f"{at}.operator", OPERATORS)
            values = fields.names(expr.get("values"), f"{at}.values", fields.string)
            if operator in ("In", "NotIn") and not values:
                raise fields.FieldError(f"{at}.values", f"must not be empty for {operator}")
            if operator in ("Exists", "DoesNotExist") and values:
                raise fields.FieldError(f"{at}.values", f"must be empty for {operator}")
            key = fields.string(expr["key"], f"{at}.key")
            expressions.append({"key": key, "operator": operator, "values": values})
        out["matchExpressions"] = expressions
    return out


def label_selector(raw: Mapping[str, Any]) -> LabelSelector:
    return LabelSelector(
        match_labels=tuple(sorted((raw.get("matchLabels") or {}).items())),
        expressions=tuple(
            Expression(e["key"], e["operator"], tuple(e["values"]))
            for e in raw.get("matchExpressions") or ()
        ),
    )


def _paths(value: Any, where: str) -> list[str]:
    paths = fields.names(value, where, fields.string)
    if len(paths) > MAX_ITEMS:
        raise fields.FieldError(where, f"must list at most {MAX_ITEMS} paths")
    for i, path in enumerate(paths):
        if not _PATH.match(path):
            raise fields.FieldError(
                f"{where}[{i}]",
                f"must be a field path under spec, such as spec.version, got {path!r}",
            )
    return paths


def _namespaces(value: Any, where: str) -> list[str]:
    return fields.names(value, where, fields.string)


IN_PLACE_FIELDS = (
    "machineSelector",
    "namespaces",
    "machine",
    "bootstrapConfig",
    "infrastructureMachine",
    "affectsAvailability",
)


def in_place_policy(value: Any, name: str) -> dict[str, Any]:
    """The normalized spec of an InPlacePolicy; raises FieldError naming the field."""
    raw = fields.mapping(value, "spec", IN_PLACE_FIELDS)
    spec = {
        "machineSelector": _selector(raw.get("machineSelector"), "spec.machineSelector"),
        "namespaces": _namespaces(raw.get("namespaces"), "spec.namespaces"),
        "machine": _paths(raw.get("machine"), "spec.machine"),
        "bootstrapConfig": _paths(raw.get("bootstrapConfig"), "spec.bootstrapConfig"),
        "infrastructureMachine": _paths(
            raw.get("infrastructureMachine"), "spec.infrastructureMachine"
        ),
        # CAPI counts a Machine under in-place update as unavailable whatever this says
        # (the book's implement-in-place-update-hooks.md): hooksvc's own note, shown to people.
        "affectsAvailability": fields.boolean(
            raw.get("affectsAvailability"), "spec.affectsAvailability", True
        ),
    }
    if not (spec["machine"] or spec["bootstrapConfig"] or spec["infrastructureMachine"]):
        raise fields.FieldError(
            "spec",
            "must cover at least one field (machine, bootstrapConfig, infrastructureMachine)",
        )
    return spec


def _version(value: Any, where: str) -> str:
    text = fields.string(value, where)
    try:
        return semver.parse(text).v
    except semver.VersionError as exc:
        raise fields.FieldError(where, str(exc)) from None


UPGRADE_FIELDS = (
    "clusterSelector",
    "namespaces",
    "clusterClass",
    "versions",
    "pins",
    "skip",
    "workers",
)


def upgrade_policy(value: Any, name: str) -> dict[str, Any]:
    """The normalized spec of an UpgradePolicy; raises FieldError naming the field."""
    raw = fields.mapping(value, "spec", UPGRADE_FIELDS, required=("versions",))
    versions = [
        _version(v, f"spec.versions[{i}]")
        for i, v in enumerate(_list(raw["versions"], "spec.versions"))
    ]
    if not versions:
        raise fields.FieldError("spec.versions", "must list at least one version")
    skip = [
        _version(v, f"spec.skip[{i}]") for i, v in enumerate(_list(raw.get("skip"), "spec.skip"))
    ]
    pins: dict[str, str] = {}
    for minor, version in fields.string_map(raw.get("pins"), "spec.pins").items():
        where = f"spec.pins.{minor}"
        match = _MINOR.match(minor)
        if match is None:
            raise fields.FieldError(where, "keys must be minors such as v1.31")
        pinned = _version(version, where)
        parsed = semver.parse(pinned)
        if (parsed.major, parsed.minor) != (int(match[1]), int(match[2])):
            raise fields.FieldError(where, f"{pinned} is not a version of minor {minor}")
        if pinned not in versions:
            raise fields.FieldError(where, f"{pinned} is not among spec.versions")
        if pinned in skip:
            raise fields.FieldError(where, f"{pinned} is also in spec.skip")
        pins[f"v{match[1]}.{match[2]}"] = pinned
    return {
        "clusterSelector": _selector(raw.get("clusterSelector"), "spec.clusterSelector"),
        "namespaces": _namespaces(raw.get("namespaces"), "spec.namespaces"),
        "clusterClass": fields.string(raw["clusterClass"], "spec.clusterClass")
        if raw.get("clusterClass") is not None
        else "",
        "versions": versions,
        "pins": pins,
        "skip": skip,
        "workers": fields.choice(raw.get("workers"), "spec.workers", WORKERS),
    }


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise fields.FieldError(where, "must be a list")
    if len(value) > MAX_ITEMS:
        raise fields.FieldError(where, f"must list at most {MAX_ITEMS} items")
    return value


@dataclasses.dataclass(frozen=True)
class InPlacePolicy:
    name: str
    selector: LabelSelector
    namespaces: tuple[str, ...]
    machine: tuple[str, ...]
    bootstrap_config: tuple[str, ...]
    infrastructure_machine: tuple[str, ...]
    affects_availability: bool

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (not self.namespaces or namespace in self.namespaces) and self.selector.matches(
            labels
        )


def typed_in_place(name: str, spec: Mapping[str, Any]) -> InPlacePolicy:
    return InPlacePolicy(
        name=name,
        selector=label_selector(spec["machineSelector"]),
        namespaces=tuple(spec["namespaces"]),
        machine=tuple(spec["machine"]),
        bootstrap_config=tuple(spec["bootstrapConfig"]),
        infrastructure_machine=tuple(spec["infrastructureMachine"]),
        affects_availability=spec["affectsAvailability"],
    )


@dataclasses.dataclass(frozen=True)
class UpgradePolicy:
    name: str
    selector: LabelSelector
    namespaces: tuple[str, ...]
    cluster_class: str
    versions: tuple[str, ...]
    pins: dict[str, str]
    skip: tuple[str, ...]
    workers: str

    def matches(self, namespace: str, labels: Mapping[str, str], cluster_class: str) -> bool:
        return (
            (not self.namespaces or namespace in self.namespaces)
            and (not self.cluster_class or cluster_class == self.cluster_class)
            and self.selector.matches(labels)
        )


def typed_upgrade(name: str, spec: Mapping[str, Any]) -> UpgradePolicy:
    return UpgradePolicy(
        name=name,
        selector=label_selector(spec["clusterSelector"]),
        namespaces=tuple(spec["namespaces"]),
        cluster_class=spec["clusterClass"],
        versions=tuple(spec["versions"]),
        pins=dict(spec["pins"]),
        skip=tuple(spec["skip"]),
        workers=spec["workers"],
    )


#: How long a process keeps the policies it read: most CanUpdate* and GenerateUpgradePlan
#: answers then need no query at all (on a busy database the one query was most of their
#: time). A change made elsewhere is seen within this long; one made in this process at once.
CACHE_SECONDS = 5.0
_cache: dict[str, tuple[float, list[Any]]] = {}


def forget() -> None:
    """Read the policies again on the next answer (called by every write of them)."""
    _cache.clear()


def _read(kind: str, typed: Any) -> list[Any]:
    now = time.monotonic()
    hit = _cache.get(kind)
    if hit is not None and now - hit[0] < CACHE_SECONDS:
        return hit[1]
    rows = Policy.objects.filter(kind=kind).order_by("name").values_list("name", "spec")
    found = [typed(name, spec) for name, spec in rows]
    _cache[kind] = (now, found)
    return found


def in_place_policies() -> list[InPlacePolicy]:
    """Every InPlacePolicy, by name: one query at most every CACHE_SECONDS, no write."""
    found: list[InPlacePolicy] = _read(IN_PLACE, typed_in_place)
    return found


def upgrade_policies() -> list[UpgradePolicy]:
    """Every UpgradePolicy, by name: one query at most every CACHE_SECONDS, no write."""
    found: list[UpgradePolicy] = _read(UPGRADE, typed_upgrade)
    return found
