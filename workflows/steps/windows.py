"""Maintenance windows: weekly times in an IANA time zone, minus excluded dates. Pure.

A window is `days` (Mon..Sun), a `start` and an `end` (HH:MM, wall time in `timeZone`); an
`end` at or before its `start` runs to that time on the next day (22:00-02:00 spans
midnight). A moment is inside when it falls in a window and its local date is not excluded
(`exclude`: a change freeze), so an excluded day cuts a midnight-spanning window at
midnight. Wall times follow daylight-saving time as `zoneinfo` resolves them: a start that
does not exist (02:30 on the spring-forward night) is read with the offset before the
change (fold=0), which is an hour later in the new time; a start that exists twice
(02:30 on the fall-back night) is the first of the two. `workflows.steps.window` waits
with it; `manage.py workflows preview` shows it.
"""

from __future__ import annotations

import dataclasses
import datetime
import zoneinfo
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
#: How far ahead the next opening is looked for: a year of weeks and a margin for freezes.
HORIZON_DAYS = 400


class WindowError(ValueError):
    """A window's definition is invalid; `field` names the offending one."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone `name`, or WindowError."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise WindowError("timeZone", f"unknown time zone {name!r}") from None


def wall_time(value: str, field: str) -> datetime.time:
    """An HH:MM wall time (00:00-23:59; 24:00 is the next day's 00:00), or WindowError."""
    try:
        hours, minutes = value.split(":")
        if len(hours) != 2 or len(minutes) != 2:
            raise ValueError
        return datetime.time(int(hours), int(minutes))
    except ValueError:
        raise WindowError(field, f"must be a time as HH:MM, not {value!r}") from None


def date(value: str, field: str) -> datetime.date:
    """A YYYY-MM-DD date, or WindowError."""
    try:
        return datetime.date.fromisoformat(value)
    except ValueError:
        raise WindowError(field, f"must be a date as YYYY-MM-DD, not {value!r}") from None


@dataclasses.dataclass(frozen=True)
class Weekly:
    days: frozenset[int]
    start: datetime.time
    end: datetime.time


@dataclasses.dataclass(frozen=True)
class Schedule:
    zone: zoneinfo.ZoneInfo
    weekly: tuple[Weekly, ...]
    exclude: frozenset[datetime.date]

    @property
    def zone_name(self) -> str:
        return str(self.zone.key)


def schedule(params: Mapping[str, Any]) -> Schedule:
    """The Schedule of a `window` step's parameters (timeZone, weekly, exclude)."""
    weekly = []
    for index, entry in enumerate(params.get("weekly") or ()):
        days = entry.get("days") or ()
        unknown = [d for d in days if d not in DAYS]
        if unknown or not days:
            raise WindowError(f"weekly[{index}].days", f"must be days among {', '.join(DAYS)}")
        weekly.append(
            Weekly(
                days=frozenset(DAYS.index(d) for d in days),
                start=wall_time(entry.get("start", ""), f"weekly[{index}].start"),
                end=wall_time(entry.get("end", ""), f"weekly[{index}].end"),
            )
        )
    if not weekly:
        raise WindowError("weekly", "needs at least one window")
    excluded = frozenset(
        date(d, f"exclude[{i}]") for i, d in enumerate(params.get("exclude") or ())
    )
    return Schedule(zone(params.get("timeZone", "")), tuple(weekly), excluded)


def _local(day: datetime.date, at: datetime.time, tz: zoneinfo.ZoneInfo) -> datetime.datetime:
    return datetime.datetime.combine(day, at, tzinfo=tz).astimezone(datetime.UTC)


def _segments(s: Schedule, since: datetime.datetime) -> Iterator[tuple[datetime.datetime, ...]]:
    """Open intervals (UTC start, end), in order of start, from the local day before `since`;
    each cut at local midnights so that excluded dates drop out whole."""
    first = since.astimezone(s.zone).date() - datetime.timedelta(days=1)
    for offset in range(HORIZON_DAYS):
        day = first + datetime.timedelta(days=offset)
        spans = []
        for w in s.weekly:
            if day.weekday() not in w.days:
                continue
            spans.append((day, w.start, w.end))
        for start_day, start, end in sorted(spans, key=lambda x: x[1]):
            crosses = end <= start
            if start_day not in s.exclude:
                cut = datetime.time(0) if crosses else end
                end_day = start_day + datetime.timedelta(days=1) if crosses else start_day
                yield _local(start_day, start, s.zone), _local(end_day, cut, s.zone)
            after = start_day + datetime.timedelta(days=1)
            if crosses and end > datetime.time(0) and after not in s.exclude:
                yield _local(after, datetime.time(0), s.zone), _local(after, end, s.zone)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a moment is inside a window; else when the next one opens (None: not within
    HORIZON_DAYS), and, inside, when the current one closes."""

    open: bool
    opens_at: datetime.datetime | None = None
    closes_at: datetime.datetime | None = None


def at(s: Schedule, now: datetime.datetime) -> Verdict:
    """Where `now` stands in schedule `s`."""
    for start, end in sorted(_segments(s, now)):
        if end <= now or end <= start:
            continue
        if start <= now:
            return Verdict(True, closes_at=_closing(s, end))
        return Verdict(False, opens_at=start)
    return Verdict(False)


def _closing(s: Schedule, end: datetime.datetime) -> datetime.datetime:
    """When the window that ends a segment at `end` really closes: a segment cut at
    midnight may go on in the next one (a window spanning midnight, or back to back)."""
    for start, later in sorted(_segments(s, end)):
        if start <= end < later:
            end = later
    return end


def describe(s: Schedule, opens_at: datetime.datetime, now: datetime.datetime) -> str:
    """The opening as an operator reads it: "Tue 02:00 Europe/Berlin" within a week, else
    with its date ("Tue 2027-01-05 02:00 Europe/Berlin", after a freeze)."""
    local = opens_at.astimezone(s.zone)
    day = DAYS[local.weekday()]
    if opens_at - now >= datetime.timedelta(days=7):
        return f"{day} {local:%Y-%m-%d %H:%M} {s.zone_name}"
    return f"{day} {local:%H:%M} {s.zone_name}"


def waits_message(s: Schedule, verdict: Verdict, now: datetime.datetime) -> str:
    """What a step that waits for `s` says (deterministic: the opening, not the time left)."""
    if verdict.opens_at is None:
        return f"waits for a maintenance window in {s.zone_name}: none opens within a year"
    return f"waits for the maintenance window {describe(s, verdict.opens_at, now)}"


def summary(params: Mapping[str, Any]) -> Sequence[str]:
    """The windows of a step's parameters as lines ("Tue,Thu 02:00-04:00 Europe/Berlin")."""
    zone_name = params.get("timeZone", "")
    lines = [
        f"{','.join(w.get('days') or ())} {w.get('start')}-{w.get('end')} {zone_name}"
        for w in params.get("weekly") or ()
    ]
    excluded = params.get("exclude") or ()
    return [*lines, *([f"except {', '.join(excluded)}"] if excluded else [])]
