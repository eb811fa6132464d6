"""How long, as an operator reads it at a glance: the admin's pages and the CLI share it."""

from __future__ import annotations


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
