"""`manage.py watch_clusters`: start add-on removal for deleted Clusters without a topology.

Runs until killed (see `workflows.watcher`); one replica is enough, and two are harmless.
"""

from __future__ import annotations

import os
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
        parser.add_argument(
            "--port",
            type=int,
            default=int(os.environ.get("HOOKSVC_WATCHER_PORT") or 0),
            help="serve /healthz and /metrics on this port (plain HTTP); 0: none",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        loop = watcher.Watcher(stop=threading.Event(), timeout_seconds=options["timeout_seconds"])
        if options["port"]:
            watcher.serve(loop, options["port"])
        loop.run()
