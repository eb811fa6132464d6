"""Test settings: the real PostgreSQL and Redis, found through HOOKSVC_TEST_* variables."""

from __future__ import annotations

import os

os.environ.setdefault(
    "HOOKSVC_DATA_DIR", os.path.join(os.path.dirname(__file__), "..", "var", "test")
)

from hooksvc.settings import *  # noqa: F403

PG_HOST = os.environ.get("HOOKSVC_TEST_PG_HOST", "127.0.0.1")
PG_PORT = os.environ.get("HOOKSVC_TEST_PG_PORT", "5432")
REDIS_URL = os.environ.get(
    "HOOKSVC_TEST_REDIS_URL",
    f"redis://127.0.0.1:{os.environ.get('HOOKSVC_TEST_REDIS_PORT', '6379')}/9",
)

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        # pytest-django adds "test_"; separate checkouts can run side by side with their own.
        "NAME": os.environ.get("HOOKSVC_TEST_DB_NAME", "hooksvc"),
        "USER": os.environ.get("HOOKSVC_TEST_PG_USER", "postgres"),
        "HOST": PG_HOST,
        "PORT": PG_PORT,
        "OPTIONS": {"connect_timeout": 5, "prepare_threshold": DB_PREPARE_THRESHOLD},  # noqa: F405
    }
}
CELERY_BROKER_URL = REDIS_URL
# The REST API's throttle counts in Redis, as in production (hooksvc/settings.py).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "hooksvc-cache",
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }
}
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
# In-process tests read a call's record right after the call (servers the tests start
# buffer, as in production).
HOOK_CALL_FLUSH_SECONDS = 0.0
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The worker tests' step types, registered in this process as in the worker.
STEP_MODULES = ["tests.workflows.steps_for_tests"]
