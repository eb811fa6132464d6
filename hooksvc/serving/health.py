"""Kubernetes probes: /healthz (the process answers) and /readyz (PostgreSQL and the broker answer).

Both answer a bare status: what failed goes to the log, not to whoever can reach the port.
"""

from __future__ import annotations

import logging

from django.db import connection
from django.http import HttpRequest, JsonResponse

from hooksvc.celery import app

logger = logging.getLogger(__name__)


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:
        logger.warning(
            "readiness: database unavailable", extra={"action": "readyz_db_down"}, exc_info=True
        )
        return False


def _broker_ok() -> bool:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return True
    except Exception:
        logger.warning(
            "readiness: broker unavailable", extra={"action": "readyz_broker_down"}, exc_info=True
        )
        return False


def readyz(request: HttpRequest) -> JsonResponse:
    # Both are checked every time so that the log says everything that is down.
    database, broker = _database_ok(), _broker_ok()
    if database and broker:
        return JsonResponse({"status": "ok"})
    return JsonResponse({"status": "unavailable"}, status=503)
