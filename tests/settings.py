"""Test settings: the real PostgreSQL and Redis, found through HOOKSVC_TEST_* variables."""

from __future__ import annotations

import os
import re
import urllib.parse

# Each pytest-xdist worker (PYTEST_XDIST_WORKER: gw0, gw1, ...) has its own var/ directory,
# Redis database (below) and PostgreSQL database (pytest-django's _gwN suffix), so that the
# workers, servers and metric files of one never meet another's.
os.environ.setdefault(
    "HOOKSVC_DATA_DIR",
    os.path.join(
        os.path.dirname(__file__), "..", "var", "test", os.environ.get("PYTEST_XDIST_WORKER", "")
    ),
)

from hooksvc.settings import *  # noqa: F403

_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_WORKER_INDEX = int(_XDIST_WORKER[2:]) if re.fullmatch(r"gw\d+", _XDIST_WORKER) else 0
PG_HOST = os.environ.get("HOOKSVC_TEST_PG_HOST", "127.0.0.1")
PG_PORT = os.environ.get("HOOKSVC_TEST_PG_PORT", "5432")
_REDIS_URL = os.environ.get(
    "HOOKSVC_TEST_REDIS_URL",
    f"redis://127.0.0.1:{os.environ.get('HOOKSVC_TEST_REDIS_PORT', '6379')}/9",
)


def _redis_db_of_worker(url: str, index: int) -> str:
    """The URL's database number (0 when it names none) plus the xdist worker's index: worker
    N of a run based on DB 9 uses DB 9 + N (Redis has 16, so -n 2 from DB 9 stays within)."""
    parts = urllib.parse.urlsplit(url)
    db = parts.path.strip("/") or "0"
    if not db.isdigit():
        raise ValueError(f"HOOKSVC_TEST_REDIS_URL's path must be a database number: {url!r}")
    return urllib.parse.urlunsplit(parts._replace(path=f"/{int(db) + index}"))


REDIS_URL = _redis_db_of_worker(_REDIS_URL, _WORKER_INDEX)

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
