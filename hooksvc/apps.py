"""Django app config: checks the hook handler configuration when the process starts."""

from __future__ import annotations

from django.apps import AppConfig


class HooksvcConfig(AppConfig):
    name = "hooksvc"

    def ready(self) -> None:
        from hooksvc import handlers

        # A bad HOOKSVC_HANDLERS fails every process at boot, not a hook call later.
        handlers.configured()
