"""Turns DATABASE_URL into a Django DATABASES entry: hooksvc runs on PostgreSQL only."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit


def parse(url: str) -> dict[str, Any]:
    """Return the DATABASES entry for a postgres:// URL; raise ValueError for anything else."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(
            f"DATABASE_URL must be postgres://user@host:5432/db (hooksvc runs on PostgreSQL"
            f" only), got the scheme {parts.scheme!r}"
        )
    return entry(
        name=unquote(parts.path.lstrip("/")) or "hooksvc",
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        host=parts.hostname or "",
        port=str(parts.port or ""),
        options=dict(parse_qsl(parts.query)),
    )


def entry(
    *,
    name: str,
    user: str,
    host: str,
    password: str = "",
    port: str,
    options: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A PostgreSQL DATABASES entry (a host starting with / is a Unix socket directory)."""
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": user,
        "PASSWORD": password,
        "HOST": host,
        "PORT": port,
        # Connections are kept for a minute, without a health check per request (a round
        # trip on every hook call): after a PostgreSQL restart the first query on a stale
        # connection fails, blocking hooks answer "hold", and Django drops that connection.
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": False,
        "OPTIONS": {"connect_timeout": 5, **(options or {})},
    }
