"""Turns DATABASE_URL into a Django DATABASES entry (PostgreSQL or SQLite)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit


def parse(url: str) -> dict[str, Any]:
    """Return the DATABASES entry for `url`; raise ValueError for an unknown scheme."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        # sqlite:///relative/or/absolute/path: everything after the scheme's "//".
        # The embedded development database: several processes share it, so writers
        # wait for each other instead of failing with "database is locked".
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": unquote(parts.path) or ":memory:",
            "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
        }
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL scheme must be postgres or sqlite, got {parts.scheme!r}")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "hooksvc",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        # Connections are kept for a minute, without a health check per request (a round
        # trip on every hook call): after a PostgreSQL restart the first query on a stale
        # connection fails, blocking hooks answer "hold", and Django drops that connection.
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": False,
        "OPTIONS": {"connect_timeout": 5, **dict(parse_qsl(parts.query))},
    }
