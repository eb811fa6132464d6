"""`approval`: done when an operator approves it (admin or `manage.py workflows approve`)."""

from __future__ import annotations

from workflows.steps import registry

#: Approving wakes the step at once; this slow poll only guards against a lost wake-up.
POLL_SECONDS = 300.0


@registry.step_type("approval", params={"message": registry.Param(str)}, inline=True)
def approval(ctx: registry.StepContext) -> registry.Outcome:
    """Waits until an operator approves the step."""
    approved_by = ctx.memo.get("approved_by")
    if approved_by:
        return registry.Done({"approvedBy": approved_by, "reason": ctx.memo.get("reason", "")})
    return registry.Poll(after=POLL_SECONDS, message="waiting for approval")
