"""`manage.py watch_clusters`: start add-on removal for deleted Clusters without a topology.

Runs until killed (see `workflows.watcher`); one replica is enough, and two are harmless.
"""

from __future__ import annotations

import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from workflows import watcher


class Command(BaseCommand):
    help = "Watch CAPI Clusters and start add-on removal for deleted ones without a topology."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--timeout-seconds",
            type=int,
            default=60,
            help="how long one watch request lasts before it is renewed",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        watcher.Watcher(stop=threading.Event(), timeout_seconds=options["timeout_seconds"]).run()
