"""Kubernetes probes: /healthz (the process answers) and /readyz (PostgreSQL and the broker
answer, and the process is not draining after SIGTERM: serving/drain.py).

Both answer a bare status: what failed goes to the log, not to whoever can reach the port.
"""

from __future__ import annotations

import logging

from django.db import connection
from django.http import HttpRequest, JsonResponse

from hooksvc.celery import app
from hooksvc.serving import drain

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
    if drain.draining():
        # Stopping: a load balancer that reads readiness sends new calls elsewhere, while
        # this process still answers the ones that reach it.
        response = JsonResponse({"status": "draining"}, status=503)
        # Expected, not an error: Django logs a 5xx at ERROR unless the response says it
        # was logged already (django/utils/log.py, log_response); the worker said it drains.
        response._has_been_logged = True  # type: ignore[attr-defined]
        return response
    # Both are checked every time so that the log says everything that is down.
    database, broker = _database_ok(), _broker_ok()
    if database and broker:
        return JsonResponse({"status": "ok"})
    return JsonResponse({"status": "unavailable"}, status=503)
