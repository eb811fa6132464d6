"""Maintenance windows: the schedule (DST, midnight, freezes), and a `window` step through the
hook path and the engine with the engine's clock held (tests/workflows/conftest.py `now`).

Wall times follow Python's zoneinfo (PEP 495): a nonexistent local time (the spring-forward
gap) is read with fold=0, the offset before the change; an ambiguous one (the fall-back
hour) is its first occurrence (cpython Lib/zoneinfo/_zoneinfo.py, `_find_trans`: fold=0
picks the earlier offset's reading). Europe/Berlin changed on 2026-03-29 (02:00 CET ->
03:00 CEST) and changes on 2026-10-25 (03:00 CEST -> 02:00 CET), per the IANA tz database's
`europe` file, EU rule: last Sunday of March and October at 01:00 UTC.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from hooksvc.contract import catalog
from tests.support import workflows as wf
from workflows.engine import scheduling
from workflows.hookpath import answers
from workflows.models import Run, StepRun, WorkflowTemplate
from workflows.steps import registry, windows

UTC = datetime.UTC


def utc(*fields: int) -> datetime.datetime:
    """A UTC moment from year, month, day, hour[, minute[, second]]."""
    return datetime.datetime.fromisoformat(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}+00:00".format(*fields, *[0] * (6 - len(fields)))
    )


def berlin(*weekly: tuple[list[str], str, str], exclude: tuple[str, ...] = ()) -> Any:
    return windows.schedule(
        {
            "timeZone": "Europe/Berlin",
            "weekly": [{"days": d, "start": s, "end": e} for d, s, e in weekly],
            "exclude": list(exclude),
        }
    )


# --- The schedule -----------------------------------------------------------------------------


def test_outside_a_window_it_names_the_next_opening_in_the_windows_own_zone() -> None:
    tuesdays = berlin((["Tue"], "02:00", "04:00"))
    monday_noon = utc(2026, 11, 23, 11)  # Mon 12:00 CET
    verdict = windows.at(tuesdays, monday_noon)
    assert verdict == windows.Verdict(False, opens_at=utc(2026, 11, 24, 1))
    assert windows.waits_message(tuesdays, verdict, monday_noon) == (
        "waits for the maintenance window Tue 02:00 Europe/Berlin"
    )


def test_inside_a_window_it_is_open_until_its_end() -> None:
    tuesdays = berlin((["Tue"], "02:00", "04:00"))
    assert windows.at(tuesdays, utc(2026, 11, 24, 2)) == windows.Verdict(
        True, closes_at=utc(2026, 11, 24, 3)
    )
    assert windows.at(tuesdays, utc(2026, 11, 24, 3)).open is False, "its end is outside"


def test_a_window_that_spans_midnight_is_open_after_midnight_and_closes_the_next_morning() -> None:
    nights = berlin((["Fri"], "22:00", "02:00"))
    saturday_1am = utc(2026, 11, 28, 0)  # Sat 01:00 CET
    assert windows.at(nights, saturday_1am) == windows.Verdict(True, closes_at=utc(2026, 11, 28, 1))
    saturday_3am = utc(2026, 11, 28, 2)
    assert windows.at(nights, saturday_3am).opens_at == utc(2026, 12, 4, 21)


def test_an_excluded_date_cuts_a_midnight_window_at_midnight() -> None:
    nights = berlin((["Fri"], "22:00", "02:00"), exclude=("2026-11-28",))
    friday_11pm = utc(2026, 11, 27, 22)
    assert windows.at(nights, friday_11pm) == windows.Verdict(
        True, closes_at=utc(2026, 11, 27, 23)
    ), "open on Friday, closed from Saturday's midnight"
    assert windows.at(nights, utc(2026, 11, 28, 0)).open is False


def test_a_freeze_moves_the_opening_past_it_and_the_message_gives_the_date() -> None:
    tuesdays = berlin(
        (["Tue"], "02:00", "04:00"), exclude=("2026-12-22", "2026-12-29", "2027-01-05")
    )
    now = utc(2026, 12, 21, 12)
    verdict = windows.at(tuesdays, now)
    assert verdict.opens_at == utc(2027, 1, 12, 1)
    assert windows.waits_message(tuesdays, verdict, now) == (
        "waits for the maintenance window Tue 2027-01-12 02:00 Europe/Berlin"
    )


def test_on_the_spring_forward_night_a_window_across_the_gap_is_an_hour_shorter() -> None:
    sundays = berlin((["Sun"], "01:00", "04:00"))
    # 01:00 CET is 00:00 UTC; 04:00 CEST is 02:00 UTC: two real hours, not three.
    assert windows.at(sundays, utc(2026, 3, 28, 12)).opens_at == utc(2026, 3, 29, 0)
    assert windows.at(sundays, utc(2026, 3, 29, 1, 30)) == windows.Verdict(
        True, closes_at=utc(2026, 3, 29, 2)
    )


def test_a_start_inside_the_spring_forward_gap_opens_an_hour_later_in_the_new_time() -> None:
    sundays = berlin((["Sun"], "02:30", "05:00"))
    # 02:30 does not exist that night; fold=0 reads it as CET (01:30 UTC = 03:30 CEST).
    verdict = windows.at(sundays, utc(2026, 3, 28, 12))
    assert verdict.opens_at == utc(2026, 3, 29, 1, 30)
    assert windows.describe(sundays, utc(2026, 3, 29, 1, 30), utc(2026, 3, 28, 12)) == (
        "Sun 03:30 Europe/Berlin"
    ), "the message names the wall time at which it really opens"


def test_on_the_fall_back_night_a_window_across_the_repeated_hour_is_an_hour_longer() -> None:
    sundays = berlin((["Sun"], "02:00", "03:00"))
    # 02:00 is its first reading (CEST, 00:00 UTC); 03:00 exists once (CET, 02:00 UTC).
    assert windows.at(sundays, utc(2026, 10, 24, 12)).opens_at == utc(2026, 10, 25, 0)
    assert windows.at(sundays, utc(2026, 10, 25, 1, 30)) == windows.Verdict(
        True, closes_at=utc(2026, 10, 25, 2)
    )


def test_back_to_back_windows_close_at_the_end_of_the_last() -> None:
    weekend = berlin((["Sat"], "00:00", "00:00"), (["Sun"], "00:00", "06:00"))
    assert windows.at(weekend, utc(2026, 11, 28, 12)).closes_at == utc(2026, 11, 29, 5)


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"timeZone": "Mars/Olympus"}, "timeZone: unknown time zone 'Mars/Olympus'"),
        ({"weekly": [{"days": ["Tue"], "start": "25:00", "end": "04:00"}]}, "weekly[0].start"),
        ({"weekly": [{"days": ["Tuesday"], "start": "02:00", "end": "04:00"}]}, "must be one of"),
        ({"weekly": [{"days": [], "start": "02:00", "end": "04:00"}]}, "needs at least one day"),
        ({"weekly": []}, "weekly: needs at least one window"),
        ({"exclude": ["24.12.2026"]}, "must be a date as YYYY-MM-DD, not '24.12.2026'"),
    ],
)
def test_an_invalid_window_is_refused_with_the_field_it_names(
    given: dict[str, Any], error: str
) -> None:
    params = {
        "timeZone": "Europe/Berlin",
        "weekly": [{"days": ["Tue"], "start": "02:00", "end": "04:00"}],
        **given,
    }
    with pytest.raises(registry.ParamError, match=error.replace("[", r"\[").replace("]", r"\]")):
        registry.validate("window", params, hook="BeforeClusterUpgrade")


# --- Through the hook path and the engine, the clock held --------------------------------------

WINDOW: dict[str, Any] = {
    "name": "window",
    "type": "window",
    "with": {
        "timeZone": "Europe/Berlin",
        "weekly": [{"days": ["Tue"], "start": "02:00", "end": "04:00"}],
    },
}


def _answer() -> answers.Answer:
    return answers.answer(wf.call(), handler_name="test")


@pytest.mark.django_db(transaction=True)
def test_the_hook_holds_until_the_window_opens_answering_the_time_to_it_capped(
    sent: list[Any], now: list[datetime.datetime]
) -> None:
    wf.template("upgrade-window", steps=[WINDOW], retryAfterSeconds=3600)
    now[0] = utc(2026, 11, 23, 11)  # Mon 12:00 CET, 14 h before the window
    _answer()
    run = Run.objects.get()
    scheduling.advance(run.pk)
    answer = _answer()
    assert answer.status == catalog.Status.SUCCESS
    assert answer.message == (
        "workflow upgrade-window waits for the maintenance window Tue 02:00 Europe/Berlin "
        "at step window"
    )
    # Polled again five minutes on (windows edited meanwhile apply): not 14 hours.
    assert 300 <= answer.retry_after <= 310, answer

    now[0] = utc(2026, 11, 24, 0, 58)  # Tue 01:58: two minutes to go
    step = StepRun.objects.get()
    scheduling.run_step(step.pk)
    step.refresh_from_db()
    assert step.due_at == utc(2026, 11, 24, 1), "due at the opening itself"
    assert 120 <= _answer().retry_after <= 122

    now[0] = utc(2026, 11, 24, 1, 0, 1)
    scheduling.run_step(step.pk)
    assert Run.objects.get().state == Run.State.SUCCEEDED
    assert _answer() == answers.PROCEED


@pytest.mark.django_db(transaction=True)
def test_an_edited_window_applies_to_a_run_already_waiting(
    sent: list[Any], now: list[datetime.datetime]
) -> None:
    template = wf.template("upgrade-window", steps=[WINDOW], retryAfterSeconds=3600)
    now[0] = utc(2026, 11, 23, 11)  # Monday
    _answer()
    scheduling.advance(Run.objects.get().pk)
    monday = [{"days": ["Mon"], "start": "08:00", "end": "18:00"}]
    mondays = {**WINDOW, "with": {**WINDOW["with"], "weekly": monday}}
    WorkflowTemplate.objects.filter(pk=template.pk).update(
        spec=wf.spec(steps=[mondays], retryAfterSeconds=3600)
    )
    now[0] += datetime.timedelta(seconds=300)
    scheduling.run_step(StepRun.objects.get().pk)
    assert Run.objects.get().state == Run.State.SUCCEEDED, "the edit applied at the next poll"


@pytest.mark.django_db(transaction=True)
def test_a_freeze_added_meanwhile_moves_the_message(
    sent: list[Any], now: list[datetime.datetime]
) -> None:
    template = wf.template("upgrade-window", steps=[WINDOW], retryAfterSeconds=3600)
    now[0] = utc(2026, 11, 23, 11)
    _answer()
    scheduling.advance(Run.objects.get().pk)
    frozen = {**WINDOW, "with": {**WINDOW["with"], "exclude": ["2026-11-24"]}}
    WorkflowTemplate.objects.filter(pk=template.pk).update(
        spec=wf.spec(steps=[frozen], retryAfterSeconds=3600)
    )
    now[0] += datetime.timedelta(seconds=300)
    scheduling.run_step(StepRun.objects.get().pk)
    assert _answer().message == (
        "workflow upgrade-window waits for the maintenance window Tue 2026-12-01 02:00 "
        "Europe/Berlin at step window"
    ), "the run's message follows the step's on a repeated poll"
