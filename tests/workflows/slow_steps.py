"""A step module whose import waits for the test (tests/workflows/steps_gate.py), so that a
test can ask the registry from another thread while it loads."""

from __future__ import annotations

from tests.workflows import steps_gate
from workflows.steps import registry

steps_gate.importing.set()
steps_gate.release.wait(30)


@registry.step_type("slow_loaded", params={})
def slow_loaded(ctx: registry.StepContext) -> registry.Outcome:
    """Registered only once the test lets the import finish."""
    return registry.Done({})
