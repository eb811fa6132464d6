"""CanUpdateMachine and CanUpdateMachineSet: RFC 6902 patches for the changes the in-place
policies cover, computed from current to desired. Pure but for reading the policies.

CAPI applies each patch to the current object, keeps only its `spec`, and compares it with
the desired one (kubernetes-sigs/cluster-api internal/util/patch/patch.go
ApplyPatchToObject; KCP's inplace_canupdatemachine.go applyPatchesToRequest, matchesMachine):
if they match, the Machine is updated in place, else replaced as usual. So a patch carries
exactly the covered fields' changes: applied to current it gives desired in those fields
and changes nothing else. The patch text is built by jsonpatch (make_patch from current to
current-with-the-covered-fields-of-desired) and sent base64-encoded: CAPI's Patch.patch is a
Go []byte. No database write here: the answer is computed on every call.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jsonpatch

from hooksvc.contract import machines
from workflows.definitions import policies
from workflows.hookpath import answers

logger = logging.getLogger(__name__)

Path = tuple[str, ...]
_MISSING = object()

#: Per hook: the response field of each object's patch.
_PATCH_FIELDS = {
    "CanUpdateMachine": ("machinePatch", "infrastructureMachinePatch", "bootstrapConfigPatch"),
    "CanUpdateMachineSet": (
        "machineSetPatch",
        "infrastructureMachineTemplatePatch",
        "bootstrapConfigTemplatePatch",
    ),
}


@dataclasses.dataclass(frozen=True)
class Coverage:
    """The field paths the matching policies cover, per object, from the object's root."""

    owner: tuple[Path, ...] = ()
    infrastructure: tuple[Path, ...] = ()
    bootstrap: tuple[Path, ...] = ()
    #: The policies that matched, by name, for logs and previews.
    policies: tuple[str, ...] = ()
    affects_availability: bool = False


def _get(obj: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


def _set(obj: dict[str, Any], path: Path, value: Any) -> bool:
    """Set `path` in `obj`, making the missing objects on the way; False (nothing done)
    when something on the way is not an object: covering it would change a parent."""
    node = obj
    for key in path[:-1]:
        child = node.get(key, _MISSING)
        if child is _MISSING:
            child = node[key] = {}
        if not isinstance(child, dict):
            return False
        node = child
    node[path[-1]] = copy.deepcopy(value)
    return True


def _remove(obj: dict[str, Any], path: Path) -> None:
    parent = _get(obj, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


def covered_target(
    current: Mapping[str, Any], desired: Mapping[str, Any], paths: Iterable[Path]
) -> dict[str, Any]:
    """`current` with each covered path taken from `desired` (removed where desired has none)."""
    target = copy.deepcopy(dict(current))
    # Shorter paths first: a path inside another is taken with it.
    for path in sorted(set(paths), key=len):
        wanted = _get(desired, path)
        if wanted is _MISSING:
            _remove(target, path)
        elif not _set(target, path, wanted):
            logger.debug("covered path %s crosses a non-object", ".".join(path))
    return target


def patch_between(current: Mapping[str, Any], target: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The RFC 6902 operations that turn `current` into `target` (jsonpatch.make_patch)."""
    operations: list[dict[str, Any]] = jsonpatch.make_patch(dict(current), dict(target)).patch
    return operations


def spine(obj: Any, paths: Iterable[Path]) -> Any:
    """`obj` with only the members on the way to the covered `paths` and under them. The
    rest is equal in current and target, so the patch between the spines of both is the
    patch between the whole objects, without comparing (or copying) what no policy covers:
    most of a Machine, a MachineSet or a bootstrap config."""
    paths = tuple(paths)
    if not isinstance(obj, dict) or any(not p for p in paths):
        return obj
    heads = {p[0] for p in paths}
    # The object's own order: jsonpatch orders its operations by it.
    return {
        key: spine(obj[key], [p[1:] for p in paths if p[0] == key]) for key in obj if key in heads
    }


def covered_patch(
    current: Mapping[str, Any], desired: Mapping[str, Any], paths: Iterable[Path]
) -> list[dict[str, Any]]:
    """The operations that give `current` desired's covered `paths` (and change nothing
    else): `patch_between(current, covered_target(current, desired, paths))`, on spines."""
    paths = tuple(paths)
    base = spine(current, paths)
    return patch_between(base, covered_target(base, desired, paths))


def encode(operations: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """CAPI's Patch: JSONPatch, its bytes base64-encoded as Go marshals a []byte."""
    text = jsonpatch.JsonPatch(list(operations)).to_string()
    return {"patchType": "JSONPatch", "patch": base64.b64encode(text.encode()).decode()}


def _paths(fields: Sequence[str], prefix: Path) -> tuple[Path, ...]:
    # A policy says `spec.version`; in a MachineSet or a template that is
    # spec.template.spec.version (CAPI: "spec.template.spec have to be covered").
    return tuple(prefix + tuple(f.split(".")[1:]) for f in fields)


def coverage(call: machines.CanUpdateCall, found: Sequence[policies.InPlacePolicy]) -> Coverage:
    """What the policies that match `call`'s owner (labels, namespace) cover."""
    owner = call.desired.owner
    matching = [p for p in found if p.matches(owner.namespace, owner.labels)]
    prefix: Path = (
        ("spec", "template", "spec") if call.hook.name == "CanUpdateMachineSet" else ("spec",)
    )
    return Coverage(
        owner=tuple(q for p in matching for q in _paths(p.machine, prefix)),
        infrastructure=tuple(q for p in matching for q in _paths(p.infrastructure_machine, prefix)),
        bootstrap=tuple(q for p in matching for q in _paths(p.bootstrap_config, prefix)),
        policies=tuple(p.name for p in matching),
        affects_availability=any(p.affects_availability for p in matching),
    )


def patches(call: machines.CanUpdateCall, cover: Coverage) -> dict[str, object]:
    """The response's patch fields: one per object whose covered fields change."""
    names = _PATCH_FIELDS[call.hook.name]
    pairs = (
        (call.current.owner, call.desired.owner, cover.owner),
        (call.current.infrastructure, call.desired.infrastructure, cover.infrastructure),
        (call.current.bootstrap, call.desired.bootstrap, cover.bootstrap),
    )
    fields: dict[str, object] = {}
    for name, (current, desired, paths) in zip(names, pairs, strict=True):
        if current is None or desired is None or not paths:
            continue
        operations = covered_patch(current.raw, desired.raw, paths)
        if operations:
            fields[name] = encode(operations)
    return fields


def answer(call: machines.CanUpdateCall) -> tuple[answers.Answer, dict[str, object]]:
    """Success with the covered changes' patches (none: CAPI replaces the Machines)."""
    cover = coverage(call, policies.in_place_policies())
    fields = patches(call, cover)
    logger.debug(
        "in-place coverage",
        extra={
            "action": "inplace_coverage",
            "policies": list(cover.policies),
            "patches": sorted(fields),
            "affects_availability": cover.affects_availability,
        },
    )
    return answers.PROCEED, fields
