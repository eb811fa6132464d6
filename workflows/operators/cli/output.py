"""How the operator CLI prints: aligned tables, JSON, and who the operator is."""

from __future__ import annotations

import getpass
import json
from collections.abc import Sequence
from typing import Any

from django.core.management.base import CommandError, OutputWrapper


def table(rows: Sequence[Sequence[Any]]) -> str:
    """`rows` (the header first) as left-aligned columns two spaces apart; empty cells as "-"."""
    cells = [["-" if c is None or c == "" else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def write_json(stdout: OutputWrapper, value: Any) -> None:
    stdout.write(json.dumps(value, indent=2, sort_keys=True))


def default_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        raise CommandError("cannot tell who you are; pass --actor NAME") from None
