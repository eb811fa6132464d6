"""What the engine reports about its work, to whoever listens (metrics), without knowing them.

The engine never imports the metrics module or the HTTP layer: it emits events here, and
`hooksvc` registers its listener when the app is ready (hooksvc/apps.py). A listener that
raises is logged and skipped: reporting never breaks the engine's work. The fields every
log line about a run carries are built here too.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import transaction

if TYPE_CHECKING:
    from workflows.models import Run, StepRun

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class StepFinished:
    """A step succeeded or failed for good; `seconds` from its first attempt."""

    step_type: str
    seconds: float
    failed: bool


@dataclasses.dataclass(frozen=True)
class StepThreads:
    """This process' step threads: how many abandoned at their bound still run."""

    abandoned: int


Event = StepFinished | StepThreads
Listener = Callable[[Event], None]

_listeners: list[Listener] = []


def listen(listener: Listener) -> None:
    """Call `listener` with every event from now on (once, however often registered)."""
    if listener not in _listeners:
        _listeners.append(listener)


def emit(event: Event) -> None:
    """Tell every listener once the transaction commits (a rolled-back one did not happen)."""
    transaction.on_commit(lambda: _tell(event))


def report(event: Event) -> None:
    """Tell every listener now: what the event says is no transaction's outcome (and asking
    for one would open a database connection in a thread that has none)."""
    _tell(event)


def _tell(event: Event) -> None:
    for listener in list(_listeners):
        try:
            listener(event)
        except Exception:
            logger.exception("engine event listener failed", extra={"action": "observe_failed"})


def log_fields(run: Run, step: StepRun | None = None) -> dict[str, Any]:
    """The fields every log line about a run (and one of its steps) carries."""
    fields: dict[str, Any] = {
        "run": run.pk,
        "hook": run.hook,
        "cluster": f"{run.cluster_namespace}/{run.cluster_name}",
        "template": run.template_name,
    }
    if step is not None:
        fields["step"] = step.name
    return fields
