"""`manage.py workflows COMMAND`: the operator CLI.

The subcommands live in workflows/operators/cli/ (one module per concern, listed in its
`MODULES`); this command only builds the parser from them and calls the chosen one, with
the INFO log lines of what it does left out of the terminal unless -v 2.
"""

from __future__ import annotations

import logging
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
        # What an action did is its answer on stdout and the run's history; the INFO line
        # it logs for the server's log came after the answer, a second answer on the
        # terminal. Warnings and errors still show; -v 2 shows everything.
        # The records still reach every other handler (a log shipper's, a test's).
        console = [
            (handler, handler.level)
            for handler in logging.getLogger().handlers
            if type(handler) is logging.StreamHandler and options["verbosity"] < 2
        ]
        for handler, _ in console:
            handler.setLevel(max(handler.level, logging.WARNING))
        try:
            options["handler"](self.stdout, options)
        finally:
            for handler, level in console:
                handler.setLevel(level)
