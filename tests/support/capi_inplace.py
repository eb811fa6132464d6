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


#: CAPI's annotations: the Machine is being updated in place (api/core/v1beta2/
#: machine_types.go UpdateInProgressAnnotation), and the hooks still to be called for it
#: (api/runtime/v1beta2/extensionconfig_types.go PendingHooksAnnotation; internal/hooks
#: MarkAsPending, MarkAsDone).
UPDATE_IN_PROGRESS = "in-place-updates.internal.cluster.x-k8s.io/update-in-progress"
PENDING_HOOKS = "runtime.cluster.x-k8s.io/pending-hooks"


class MachineController:
    """The Machine controller's reconcileInPlaceUpdate, reduced to what an extension sees
    (core/reconcilers/machine/machine_controller_inplace_update.go): while the Machine is
    marked for update and UpdateMachine is pending, call it; Success with retryAfterSeconds
    requeues after that long; Success with 0 completes (annotations removed, the hook marked
    done); Failure is an error: the update is failed and controller-runtime requeues with
    backoff, the hook still pending, so the next reconcile calls again."""

    def __init__(self, post: Any, machine: dict[str, Any]) -> None:
        self.post = post
        self.objects = machine
        self.annotations = {UPDATE_IN_PROGRESS: "", PENDING_HOOKS: "UpdateMachine"}
        self.answers: list[dict[str, Any]] = []
        self.failures = 0

    @property
    def done(self) -> bool:
        return UPDATE_IN_PROGRESS not in self.annotations

    def reconcile(self) -> float:
        """One reconcile; the seconds until the next (0: nothing more to do)."""
        if self.done or self.annotations.get(PENDING_HOOKS) != "UpdateMachine":
            return 0.0
        answer = self.post({"apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
                            "kind": "UpdateMachineRequest", "desired": self.objects})  # fmt: skip
        self.answers.append(answer)
        if answer["status"] != "Success":
            self.failures += 1
            # controller-runtime's rate limiter: 5 ms doubling, capped (here at 1 s).
            return float(min(1.0, 0.005 * 2.0**self.failures))
        wait = float(answer["retryAfterSeconds"])
        if wait > 0:
            return wait
        self.annotations.pop(UPDATE_IN_PROGRESS)
        self.annotations.pop(PENDING_HOOKS)
        return 0.0
