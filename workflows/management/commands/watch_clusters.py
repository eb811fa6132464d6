"""`manage.py watch_clusters`: the Cluster watcher and the resource controller, one leader.

Runs until SIGTERM or SIGINT. While it leads (`workflows.controllers.leader`), it starts
add-on removal for deleted Clusters without a topology (`workflows.controllers.watcher`)
and keeps the WorkflowTemplate and AddonProfile resources in sync with hooksvc
(`workflows.controllers.resources`); another replica stands by.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from hooksvc import pid1
from workflows.controllers import leader, resources, watcher

#: The custom resources kept in sync with hooksvc.
KINDS = ("WorkflowTemplate", "AddonProfile", "InPlacePolicy", "UpgradePolicy")


class Command(BaseCommand):
    help = (
        "Watch CAPI Clusters (add-on removal for deleted ones without a topology) and keep "
        "hooksvc's WorkflowTemplate and AddonProfile resources in sync, as one leader."
    )

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
        stop = threading.Event()
        timeout = options["timeout_seconds"]

        def loops(term: threading.Event) -> list[leader.Loop]:
            return [
                watcher.Watcher(stop=term, timeout_seconds=timeout),
                *(resources.Resources(kind, stop=term, timeout_seconds=timeout) for kind in KINDS),
            ]

        manager = leader.Manager(stop=stop, loops=loops)

        def stopping(signum: int, frame: FrameType | None) -> None:
            # Setting `stop` ends the manager's wait; the exception ends it at once (Python
            # runs the handler in the main thread and propagates what it raises, PEP 475):
            # the manager stops its loops (threads blocked in a watch are daemons) and
            # frees the lead for a standby. An event cut short is handled again by the next
            # leader: removal runs are unique per Cluster, and the upserts change nothing twice.
            stop.set()
            pid1.leave(0)

        # Also as PID 1 in a container, where an unhandled SIGTERM is ignored.
        signal.signal(signal.SIGTERM, stopping)
        signal.signal(signal.SIGINT, stopping)
        if options["port"]:
            watcher.serve(manager, options["port"])
        manager.run()
