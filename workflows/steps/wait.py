"""`wait`: a timer. The step is polled when it is due; no worker sleeps through it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workflows import clock
from workflows.steps import registry

#: How long past its end a timer may go unpolled before it shows as stalled.
STALL_SLACK_SECONDS = 300


def _normal(params: Mapping[str, Any]) -> int:
    # It reports the same for the whole wait; a due timer is polled within seconds.
    return int(float(params.get("seconds") or 0)) + STALL_SLACK_SECONDS


def _seconds(params: Mapping[str, Any]) -> float:
    """A wait takes its `seconds` (a bool is no number of seconds)."""
    seconds = params["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return 0.0
    return float(seconds)


@registry.step_type(
    "wait",
    params={"seconds": registry.Param((int, float), required=True, minimum=0)},
    inline=True,
    stall_seconds=_normal,
    least_seconds=_seconds,
)
def wait(ctx: registry.StepContext) -> registry.Outcome:
    """Waits `seconds` from the step's first run."""
    now = clock.epoch()
    # The first call fixes the end; a re-run after a crash keeps the same end.
    until = ctx.memo.setdefault("until", now + float(ctx.params["seconds"]))
    if now >= until:
        return registry.Done({"waitedSeconds": ctx.params["seconds"]})
    # On time: a hook held on this wait lets go as soon as it ends (not a beat later).
    return registry.Poll(
        after=until - now, message=f"waiting {ctx.params['seconds']:g} s", on_time=True
    )
