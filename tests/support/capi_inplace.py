"""What Cluster API does with a CanUpdateMachine / CanUpdateMachineSet answer, as a test model.

From kubernetes-sigs/cluster-api (ae7ff047db): KCP's inplace_canupdatemachine.go
(`applyPatchesToRequest`, then `matchesMachine`) and internal/util/patch/patch.go
(`ApplyPatchToObject`): each defined patch is base64-decoded (a Go []byte), applied to the
current object as RFC 6902 (evanphx/json-patch; here python-json-patch), and only the
patched object's `spec` is copied back; the Machine is updated in place only if every
object's spec then equals the desired one. The MachineDeployment controller does the same
with the MachineSet and its templates.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch

_OBJECTS = {
    "CanUpdateMachine": (
        ("machine", "machinePatch"),
        ("infrastructureMachine", "infrastructureMachinePatch"),
        ("bootstrapConfig", "bootstrapConfigPatch"),
    ),
    "CanUpdateMachineSet": (
        ("machineSet", "machineSetPatch"),
        ("infrastructureMachineTemplate", "infrastructureMachineTemplatePatch"),
        ("bootstrapConfigTemplate", "bootstrapConfigTemplatePatch"),
    ),
}


def apply_answer(hook: str, request: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """The request's current objects with the answer's patches applied (spec only)."""
    patched = copy.deepcopy(request["current"])
    for key, patch_field in _OBJECTS[hook]:
        patch = answer.get(patch_field)
        if not patch or key not in patched:
            continue
        assert patch["patchType"] == "JSONPatch"
        operations = json.loads(base64.b64decode(patch["patch"]))
        result = jsonpatch.apply_patch(patched[key], operations)
        patched[key]["spec"] = result.get("spec")
    out: dict[str, Any] = patched
    return out


def can_update_in_place(hook: str, request: dict[str, Any], answer: dict[str, Any]) -> bool:
    """matchesMachine: every object's patched spec equals the desired one."""
    if answer["status"] != "Success":
        return False
    patched = apply_answer(hook, request, answer)
    return all(
        patched[key].get("spec") == request["desired"][key].get("spec")
        for key, _ in _OBJECTS[hook]
        if key in request["desired"]
    )
