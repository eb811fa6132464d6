"""The subcommands of `manage.py workflows`, one module per concern.

Each module in `MODULES` has `register(subparsers)`, which adds its subcommands and sets
each one's `handler` default: `handler(stdout, options)` prints to `stdout` and raises
`CommandError` (exit 1) for what it cannot do. To add a subcommand, write a module with
`register` and list it here; workflows/management/commands/workflows.py stays as it is.
"""

from __future__ import annotations

import argparse
from typing import Any, Protocol

from workflows.operators.cli import bypass, operate, preview, rollout, runs, tokens, why


class Subcommands(Protocol):
    """A module of subcommands."""

    def register(self, sub: argparse._SubParsersAction[Any]) -> None: ...


#: The modules whose subcommands `manage.py workflows` offers, in the order `--help` lists them.
MODULES: tuple[Subcommands, ...] = (runs, why, operate, preview, bypass, rollout, tokens)
