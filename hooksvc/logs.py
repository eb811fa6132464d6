"""One JSON object per log line, carrying the cluster, hook, run and step it is about.

Fields passed with `extra=` (action, run, hook, cluster, step, ...) become top-level keys,
so a log pipeline can follow one run from its hook call to the worker's steps by `run`.

No query string reaches a log with its values: an API token sent as `?access_token=`, an
OIDC callback's `code` and `state`. Django passes the request itself as `extra` (its
`django.request` and `django.security` records), whose repr is the full URL
(django/http/request.py HttpRequest.__repr__ uses get_full_path()); a request is written as
its method and path, and every `?name=value` in a line keeps the name only (`redact_queries`,
also applied by `make run` to what its children print, hooksvc.serving.terminal).
"""

from __future__ import annotations

import datetime
import json
import logging
import re
from typing import Any

# Attributes every LogRecord has; anything else came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


#: A URL's query string: from `?` to the first space, quote or angle bracket.
_QUERY = re.compile(r"\?[^\s'\"<>?]*=[^\s'\"<>]*")


def _names_only(match: re.Match[str]) -> str:
    parts = match[0][1:].split("&")
    return "?" + "&".join(f"{p.split('=', 1)[0]}=[redacted]" if "=" in p else p for p in parts)


def redact_queries(text: str) -> str:
    """`text` with the value of every query parameter replaced by `[redacted]`."""
    return _QUERY.sub(_names_only, text) if "?" in text else text


def _shown(value: Any) -> Any:
    """An extra field as logged: a request as its method and path, never its query."""
    if hasattr(value, "method") and hasattr(value, "path") and hasattr(value, "META"):
        return f"{value.method} {value.path}"
    return value


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
                entry[key] = _shown(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return redact_queries(json.dumps(entry, default=str))


class TextFormatter(logging.Formatter):
    """Human-readable lines for `make run`, with the same extra fields as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = " ".join(
            f"{k}={_shown(v)}"
            for k, v in vars(record).items()
            if k not in _STANDARD and not k.startswith("_")
        )
        return redact_queries(f"{line} {extras}" if extras else line)
