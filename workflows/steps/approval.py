"""`approval`: done when an operator approves it (admin or `manage.py workflows approve`)."""

from __future__ import annotations

from workflows.steps import memo, registry

#: Approving wakes the step at once; this slow poll only guards against a lost wake-up.
POLL_SECONDS = 300.0
WAITING = "waiting for approval"


@registry.step_type(
    "approval",
    params={"message": registry.Param(str)},
    inline=True,
    waiting_message=WAITING,
    waits_for_person=True,
    # A person ends it: shown as waiting for approval, bounded by its run's deadline.
    stall_seconds=0,
)
def approval(ctx: registry.StepContext) -> registry.Outcome:
    """Waits until an operator approves the step."""
    approved_by = ctx.memo.get(memo.APPROVED_BY)
    if approved_by:
        return registry.Done(
            {"approvedBy": approved_by, "reason": ctx.memo.get(memo.APPROVAL_REASON, "")}
        )
    return registry.Poll(after=POLL_SECONDS, message=WAITING)
