"""`noop`: finishes at once. For wiring templates up, tests and benchmarks."""

from __future__ import annotations

from workflows.steps import registry


# Runs at once when due: five minutes unrun means the workers are behind.
@registry.step_type("noop", inline=True, stall_seconds=300)
def noop(ctx: registry.StepContext) -> registry.Outcome:
    """Does nothing and succeeds."""
    return registry.Done()
