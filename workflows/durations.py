"""How long, how many and when, as an operator reads it at a glance: the pages, the CLI, the
API and the Events share it (at the bottom of the layers, so the engine's stall notices say
it the same way). Every time a page shows is `at`'s, with its zone."""

from __future__ import annotations

import datetime

from django.utils import timezone


def span(seconds: float) -> str:
    """A duration an operator reads at a glance: 45 s, 12 min, 3 h 05 min, 2 d 4 h."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def count(number: int, word: str, plural: str = "") -> str:
    """A count with its noun agreeing: "1 canary", "2 canaries", "0 volumes". `plural`
    defaults to `word` + "s"."""
    return f"{number} {word if number == 1 else plural or word + 's'}"


def noun(number: int, word: str, plural: str = "") -> str:
    """The noun alone, agreeing with `number` ("of 1 step", "of 5 steps")."""
    return word if number == 1 else plural or word + "s"


def at(moment: datetime.datetime | None) -> str:
    """An absolute time to the second, with its zone (the server's, UTC unless configured):
    2025-06-01 12:03:04 UTC; "-" for none. The one way the pages write a time."""
    if moment is None:
        return "-"
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")
