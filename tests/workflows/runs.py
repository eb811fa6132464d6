"""Runs made directly with the ORM, in whatever state a test needs."""

from __future__ import annotations

from typing import Any

from workflows.definitions import typed
from workflows.models import Run, StepRun
from workflows.steps import registry

#: A stored spec with every default (the typed template's), and no steps.
SPEC: dict[str, Any] = typed.Template(hook="BeforeClusterUpgrade").as_spec()


def make_run(
    *,
    template: str = "backup-before-upgrade",
    state: str = Run.State.RUNNING,
    hook: str = "BeforeClusterUpgrade",
    cluster: str = "prod/c1",
    moment: str = "v1.33.0",
    steps: tuple[tuple[str, str, str], ...] = (),
) -> Run:
    """A run of `template` with `steps` given as (name, type, state), each after the one before."""
    namespace, name = cluster.split("/")
    run = Run.objects.create(
        template_name=template,
        template_generation=1,
        spec={
            **SPEC,
            "hook": hook,
            "steps": [{"name": n, "type": t, "with": {}, "dependsOn": []} for n, t, _ in steps],
        },
        hook=hook,
        cluster_key=f"uid-{namespace}-{name}",
        cluster_namespace=namespace,
        cluster_name=name,
        moment=moment,
        state=state,
        message=f"workflow {template} is running",
    )
    previous: list[str] = []
    for position, (step_name, step_type, step_state) in enumerate(steps):
        StepRun.objects.create(
            run=run,
            name=step_name,
            position=position,
            type=step_type,
            waits_for_person=registry.waits_for_person(step_type),
            depends_on=previous[-1:],
            retries=3,
            state=step_state,
            failures=1 if step_state == StepRun.State.FAILED else 0,
            message="it broke" if step_state == StepRun.State.FAILED else "",
        )
        previous.append(step_name)
    return run
