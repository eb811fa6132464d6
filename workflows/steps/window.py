"""`window`: done once a maintenance window is open (workflows.steps.windows decides).

Outside a window it polls until the next opening, at most `MAX_WAIT_SECONDS` ahead, so the
hook answers the time until the window opens (the waiting step's due_at, read by the hook
path's one query: workflows.hookpath.retry) but never more than five minutes, and the run
says "waits for the maintenance window Tue 02:00 Europe/Berlin". Each poll reads the
window from the template as it is now (its step of the same name): an edited window, or a
freeze added to `exclude`, applies to runs already waiting within those five minutes. This
is the one place a run reads its template after it started (docs/rollouts.md says why);
without such a step there, the run's own copy counts.

A window closing later does not stop the run: the step is done once it was open. A chained
upgrade's later hooks are separate calls, so each template that must start inside a window
has its own `window` step (docs/rollouts.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from workflows import clock
from workflows.models import Run, WorkflowTemplate
from workflows.steps import registry, windows

#: The longest a waiting window step sleeps, so that an edited window applies within it.
MAX_WAIT_SECONDS = 300.0
WAITING = "waiting for the maintenance window"


def _checked(parse: Callable[[str], object]) -> Callable[[str], str]:
    """A parameter's check from one of `windows`' parsers: its error is the parameter's."""

    def check(value: str) -> str:
        try:
            parse(value)
        except windows.WindowError as exc:
            raise registry.ParamError("", str(exc)) from None
        return value

    return check


_check_zone = _checked(windows.zone)
_check_time = _checked(lambda value: windows.wall_time(value, ""))
_check_date = _checked(lambda value: windows.date(value, ""))


_WEEKLY = registry.Param(
    dict,
    fields={
        "days": registry.Param(
            list, required=True, items=registry.Param(str, choices=windows.DAYS)
        ),
        "start": registry.Param(str, required=True, check=_check_time),
        "end": registry.Param(str, required=True, check=_check_time),
    },
)


def _check_weekly(value: list[Any]) -> list[Any]:
    if not value:
        raise registry.ParamError("", "needs at least one window")
    for index, entry in enumerate(value):
        if isinstance(entry, Mapping) and entry.get("days") == []:
            raise registry.ParamError(f"[{index}].days", "needs at least one day")
    return value


PARAMS = {
    #: An IANA time zone ("Europe/Berlin"): the windows' wall times are read in it.
    "timeZone": registry.Param(str, required=True, check=_check_zone),
    #: Weekly windows: days (Mon..Sun), start and end (HH:MM); an end at or before the
    #: start runs into the next day.
    "weekly": registry.Param(list, required=True, check=_check_weekly, items=_WEEKLY),
    #: Dates (YYYY-MM-DD, in timeZone) on which no window is open: a change freeze.
    "exclude": registry.Param(list, items=registry.Param(str, check=_check_date), default=[]),
}


@registry.step_type(
    "window",
    params=PARAMS,
    waiting_message=WAITING,
    says_own_wait=True,
    # A weekly window opens within a week: a step that has said the same for eight days
    # waits for a freeze, or a window that never opens (docs/stalls.md). It fails after
    # 35 days (a four-week freeze and the week after) unless its template says otherwise.
    default_timeout_seconds=35 * 86400,
    stall_seconds=8 * 86400,
    # A quick read of one row.
    call_timeout_seconds=30,
)
def window(ctx: registry.StepContext) -> registry.Outcome:
    """Waits until a maintenance window is open."""
    now = ctx.now or clock.now()
    schedule = windows.schedule(_current_params(ctx))
    verdict = windows.at(schedule, now)
    if verdict.open:
        closes = verdict.closes_at.isoformat() if verdict.closes_at else ""
        return registry.Done({"openedAt": now.isoformat(), "closesAt": closes})
    after = MAX_WAIT_SECONDS
    if verdict.opens_at is not None:
        after = min(after, max((verdict.opens_at - now).total_seconds(), 0.0))
    return registry.Poll(
        after=after,
        message=windows.waits_message(schedule, verdict, now),
        on_time=after < MAX_WAIT_SECONDS,
    )


def _current_params(ctx: registry.StepContext) -> Mapping[str, Any]:
    """The window as the template says now (its step of this name and type), else the
    run's copy. An edit that does not validate is not applied: apply refuses it first."""
    run = Run.objects.filter(pk=ctx.run_id).values("template_name", "hook").first()
    spec = (
        WorkflowTemplate.objects.filter(name=run["template_name"], hook=run["hook"])
        .values_list("spec", flat=True)
        .first()
        if run
        else None
    )
    for step in (spec or {}).get("steps") or ():
        if step.get("name") == ctx.step_name and step.get("type") == "window":
            try:
                return registry.validate_params(PARAMS, step.get("with") or {})
            except registry.ParamError:
                break
    return ctx.params
