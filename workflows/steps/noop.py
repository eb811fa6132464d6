"""`noop`: finishes at once. For wiring templates up, tests and benchmarks."""

from __future__ import annotations

from workflows.steps import registry


@registry.step_type("noop", inline=True)
def noop(ctx: registry.StepContext) -> registry.Outcome:
    """Does nothing and succeeds."""
    return registry.Done()
