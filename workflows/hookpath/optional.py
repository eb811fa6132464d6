"""The answers of the optional hooks: in-place updates and upgrade plans.

CanUpdateMachine, CanUpdateMachineSet and GenerateUpgradePlan are computed from the
operator's policies, never stored (no write on their path); UpdateMachine is a workflow
per requested update of a Machine, answered like a lifecycle hook. The hook view
(hooksvc.serving.views) calls `answer` and renders what it returns.
"""

from __future__ import annotations

from hooksvc.contract import machines
from workflows.hookpath import answers, inplace, upgradeplan

#: Response fields of the hook (patches, upgrade steps), carried only by a Success.
Fields = dict[str, object]

MSG_NO_UPDATE_TEMPLATE = (
    "no UpdateMachine workflow template matches Machine {machine}; apply one, or stop"
    " serving the InPlaceUpdates hooks"
)


def answer(call: machines.OptionalCall, *, handler_name: str) -> tuple[answers.Answer, Fields]:
    """The answer to `call` and the hook's own response fields."""
    if isinstance(call, machines.CanUpdateCall):
        return inplace.answer(call)
    if isinstance(call, machines.UpgradePlanCall):
        return upgradeplan.answer(call)
    # The engine's path, as for a lifecycle hook: one run per (template, Machine's cluster,
    # Machine and desired spec), joined by every repeated call.
    owner = call.desired.owner
    unmatched = answers.not_served(
        MSG_NO_UPDATE_TEMPLATE.format(machine=f"{owner.namespace}/{owner.name}")
    )
    hook_call = machines.update_hook_call(call)
    return answers.answer(hook_call, handler_name=handler_name, unmatched=unmatched), {}
