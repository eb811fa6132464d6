"""Django app config: checks the hook handlers and wires the metrics when a process starts."""

from __future__ import annotations

from django.apps import AppConfig


class HooksvcConfig(AppConfig):
    name = "hooksvc"

    def ready(self) -> None:
        from hooksvc import metrics
        from hooksvc.contract import handlers
        from workflows.engine import observe

        # A bad HOOKSVC_HANDLERS fails every process at boot, not a hook call later.
        handlers.configured()
        # The engine reports through its own interface; the metrics listen to it.
        observe.listen(metrics.engine_event)
