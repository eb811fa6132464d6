"""Throttling per caller: each API token, person or session, and each address for requests
without a credential, gets HOOKSVC_API_RATE requests (DRF's sliding window).

The counts live in Django's cache, which is Redis where the broker is (hooksvc/settings.py):
every web process counts together. If that Redis does not answer, requests are let through
rather than failed: throttling protects hooksvc, and an API down with the broker would
stop the very operators who are fixing it.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from redis.exceptions import RedisError
from rest_framework import throttling
from rest_framework.request import Request

from workflows.api.auth import Caller

logger = logging.getLogger(__name__)


class PerCaller(throttling.SimpleRateThrottle):
    scope = "caller"

    def get_rate(self) -> str:
        # Read per request (DRF copies its setting once, at import): tests change it.
        rate: str = settings.API_RATE
        return rate

    def get_cache_key(self, request: Request, view: Any) -> str:
        user = request.user
        who = user.key if isinstance(user, Caller) else f"address:{self.get_ident(request)}"
        return f"throttle:{self.scope}:{who}"

    def allow_request(self, request: Request, view: Any) -> bool:
        try:
            return super().allow_request(request, view)
        except (RedisError, OSError) as exc:
            logger.warning("API throttle not counted", extra={"error": type(exc).__name__})
            return True
