"""How long, as an operator reads it at a glance: the pages, the CLI, the API and the Events
share it (at the bottom of the layers, so the engine's stall notices say it the same way)."""

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
