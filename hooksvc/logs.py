"""One JSON object per log line, carrying the cluster, hook, run and step it is about.

Fields passed with `extra=` (action, run, hook, cluster, step, ...) become top-level keys,
so a log pipeline can follow one run from its hook call to the worker's steps by `run`.
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

# Attributes every LogRecord has; anything else came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """Human-readable lines for `make run`, with the same extra fields as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = " ".join(
            f"{k}={v}"
            for k, v in vars(record).items()
            if k not in _STANDARD and not k.startswith("_")
        )
        return f"{line} {extras}" if extras else line
