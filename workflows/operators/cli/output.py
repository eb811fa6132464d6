"""How the operator CLI prints: aligned tables, JSON, and who the operator is.

Who: the shell's CLI acts as the local superuser would (whoever runs it has the database's
credentials anyway), recorded as `--actor NAME` or `cli:<OS user>`. `--as USER` instead
answers and acts as that user, under their roles (workflows.operators.access): a person who
signed in through the identity provider (named by their e-mail), with the groups of their
last sign-in, recorded with their subject and e-mail; or a local account.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, OutputWrapper

from workflows.operators import access, identities

#: Between two columns of a table.
GAP = "  "
#: What ends a cell cut to fit.
CUT = "\N{HORIZONTAL ELLIPSIS}"


def table(
    rows: Sequence[Sequence[Any]],
    *,
    width: int = 0,
    shrink: Mapping[int, tuple[int, int]] | None = None,
) -> str:
    """`rows` (the header first) as left-aligned columns two spaces apart; empty cells as "-".

    With `width`, the columns in `shrink` (index: (narrowest width, weight)) are cut until
    each line fits in `width` characters, the widest for its weight first (a column of
    weight 2 keeps about twice the width of one of weight 1); a cut cell ends with "…".
    """
    cells = [
        ["-" if c is None or c == "" else " ".join(str(c).split()) for c in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    if width:
        _fit(widths, width - len(GAP) * (len(widths) - 1), shrink or {})
    return "\n".join(
        GAP.join(_cell(c, w).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def _fit(widths: list[int], room: int, shrink: Mapping[int, tuple[int, int]]) -> None:
    """Narrow the columns in `shrink`, widest for its weight first, until they fit in `room`."""
    while sum(widths) > room:
        narrowable = [i for i, (least, _) in shrink.items() if widths[i] > least]
        if not narrowable:
            return
        widest = max(narrowable, key=lambda i: (widths[i] / shrink[i][1], i))
        widths[widest] -= 1


def _cell(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - len(CUT)] + CUT


def write_json(stdout: OutputWrapper, value: Any) -> None:
    stdout.write(json.dumps(value, indent=2, sort_keys=True))


def default_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        raise CommandError("cannot tell who you are; pass --actor NAME") from None


def add_who(parser: argparse.ArgumentParser, *, acts: bool) -> None:
    """`--as USER` (and, for commands that act, `--actor NAME`)."""
    parser.add_argument(
        "--as",
        dest="as_user",
        metavar="USER",
        help="answer and act as this user, under their roles (default: unrestricted)",
    )
    if acts:
        parser.add_argument("--actor", metavar="NAME", help="who (default: cli:<OS user>)")


def actor_of(options: Mapping[str, Any], *, acts: bool) -> access.Actor:
    """Who the command answers and acts for (see the module's docstring)."""
    as_user, name = options.get("as_user"), options.get("actor")
    if as_user and name:
        raise CommandError("--as USER records that user; give no --actor with it")
    if as_user:
        _say_what_differs()
        try:
            found = identities.actor_named(as_user)
        except LookupError as exc:
            raise CommandError(str(exc)) from None
        reason = identities.no_role(found, as_user)
        if reason:  # the answers that follow are empty for that reason, not for want of runs
            sys.stderr.write(f"note: {reason}\n")
        return found
    return access.unrestricted(name or (default_actor() if acts else "cli"))


def _say_what_differs() -> None:
    """Name the settings this shell gives otherwise than the `make run` beside it: what a
    person may see depends on them (hooksvc.devrun)."""
    differs = getattr(settings, "SERVING_DIFFERS", [])
    if differs:
        sys.stderr.write(
            f"note: this shell sets {', '.join(differs)} otherwise than the `make run` beside"
            " it; the answers follow this shell's\n"
        )
