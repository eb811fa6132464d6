"""A module of custom step types that takes a while to import, as one with heavy imports does.

Named in HOOKSVC_STEP_MODULES by tests/workflows/test_registry_race.py: the registry must not
answer lookups while it is being imported.
"""

from __future__ import annotations

import time

from workflows.steps import registry

# An SDK's import, a plugin scan: long enough for every other thread to look a type up.
time.sleep(0.5)


@registry.step_type("slow_import")
def slow_import(ctx: registry.StepContext) -> registry.Outcome:
    """Succeeds: what matters is that it is registered before anyone looks it up."""
    return registry.Done()
