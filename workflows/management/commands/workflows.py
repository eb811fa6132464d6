"""`manage.py workflows COMMAND`: the operator CLI.

The subcommands live in workflows/operators/cli/ (one module per concern, listed in its
`MODULES`); this command only builds the parser from them and calls the chosen one.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from hooksvc import build
from workflows.operators import cli


class Command(BaseCommand):
    help = "List and show workflow runs, act on them, and preview what a hook call would start."

    def get_version(self) -> str:
        # `manage.py workflows --version`: hooksvc's build, not Django's version.
        return build.describe()

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
        for module in cli.MODULES:
            module.register(sub)

    def handle(self, *args: Any, **options: Any) -> None:
        options["handler"](self.stdout, options)
