"""What the benchmarks register in hooksvc's processes (HOOKSVC_STEP_MODULES=bench.steps).

`bench_poll` stands for a step that waits on something outside (a backup, a job): it asks to
be polled again every `every` seconds until it has been called `polls` times. `noop` is the
plain Celery task that engine throughput is compared with; the worker loads this module
with `-I bench.steps`.
"""

from __future__ import annotations

from celery import shared_task

from workflows.steps import registry


@registry.step_type(
    "bench_poll",
    params={
        "polls": registry.Param(int, required=True, minimum=1),
        "every": registry.Param((int, float), default=10, minimum=0),
    },
)
def bench_poll(ctx: registry.StepContext) -> registry.Outcome:
    """Done on its `polls`-th call; until then, poll again in `every` seconds."""
    polls = int(ctx.memo.get("polls", 0)) + 1
    ctx.memo["polls"] = polls
    if polls >= ctx.params["polls"]:
        return registry.Done({"polls": polls})
    return registry.Poll(after=float(ctx.params["every"]), message="polling")


@shared_task(name="bench.noop")
def noop() -> None:
    """The baseline: a Celery task that does nothing."""
