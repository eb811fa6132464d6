"""Django settings for hooksvc, read from the environment.

Every knob is an environment variable, listed in docs/settings.md's table and in
`ENVIRONMENT` below (docker-compose and the k8s manifests are checked against that list).
With nothing set, the process runs the development setup of `make run`: the local
PostgreSQL and Redis that `make run` starts under HOOKSVC_DATA_DIR (hooksvc.devdb,
hooksvc.devbroker); beside a running `make run`, what it was given (hooksvc.devrun).
Production requires DATABASE_URL.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Any

from hooksvc import dburl, devbroker, devdb, devrun, environment

BASE_DIR = Path(__file__).resolve().parent.parent

#: Every environment variable the code reads, with what it means (hooksvc/environment.py).
ENVIRONMENT = environment.ENVIRONMENT


def _number(name: str, default: float, *, zero: bool = False) -> float:
    """A number above zero (or zero too) from the environment; else a startup error naming it."""
    raw = os.environ.get(name, "")
    bound = "0 or more" if zero else "above 0"
    try:
        value = float(raw) if raw else float(default)
    except ValueError:
        raise RuntimeError(f"{name} must be a number {bound}, got {raw!r}") from None
    if not (value >= 0 if zero else value > 0) or value == float("inf"):
        raise RuntimeError(f"{name} must be a number {bound}, got {raw!r}")
    return value


HOOKSVC_ENV = os.environ.get("HOOKSVC_ENV", "development")
if HOOKSVC_ENV not in ("development", "production"):
    raise RuntimeError(f"HOOKSVC_ENV must be development or production, got {HOOKSVC_ENV!r}")
PRODUCTION = HOOKSVC_ENV == "production"

DATA_DIR = Path(os.environ.get("HOOKSVC_DATA_DIR", BASE_DIR / "var"))
#: What a `make run` serving from DATA_DIR was started with and this process was not given
#: (its database, broker, sign-in, roles...): a manage.py beside it serves alike with nothing
#: exported (hooksvc.devrun). SERVING_DIFFERS: what this process was given otherwise.
SERVING_TAKEN = {} if PRODUCTION else devrun.adopt(DATA_DIR, os.environ)
SERVING_DIFFERS = [] if PRODUCTION else devrun.differences(DATA_DIR, os.environ)

#: How an operator runs manage.py where hooksvc runs, as the commands hooksvc suggests
#: print it: the image's Python is on PATH (its WORKDIR holds manage.py); a checkout's is
#: in .venv, and a fresh shell there may have no `python` at all.
MANAGE_PY = "python manage.py" if PRODUCTION else ".venv/bin/python manage.py"


def _secret_key() -> str:
    key = os.environ.get("HOOKSVC_SECRET_KEY", "")
    if key:
        return key
    if PRODUCTION:
        raise RuntimeError("HOOKSVC_SECRET_KEY must be set when HOOKSVC_ENV=production")
    # Development: a random key kept in the data directory, so that every process of
    # `make run` signs sessions alike. Never a fixed default.
    path = DATA_DIR / "secret_key"
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        # 0600 from its creation (a chmod after would leave a moment it is readable), written
        # aside and linked into place: a process starting beside this one reads a whole key,
        # and the first to link wins.
        partial = DATA_DIR / f".secret_key.{os.getpid()}"
        partial.unlink(missing_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(50))
        try:
            os.link(partial, path)
        except FileExistsError:
            pass
        finally:
            partial.unlink()
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = os.environ.get("HOOKSVC_DEBUG", "") == "1" and not PRODUCTION
ALLOWED_HOSTS = [h for h in os.environ.get("HOOKSVC_ALLOWED_HOSTS", "*").split(",") if h]

INSTALLED_APPS = [
    "workflows.operators.admin.apps.AdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "hooksvc",
    "workflows",
]

MIDDLEWARE = [
    "hooksvc.serving.middleware.PortSplitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # The admin's CSS and JavaScript, straight from the installed apps (no collectstatic).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "hooksvc.urls"
WSGI_APPLICATION = "hooksvc.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The admin's pages with hooksvc's breadcrumbs (docs/admin.md).
        "DIRS": [BASE_DIR / "workflows" / "operators" / "admin" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

_DATABASE_URL = os.environ.get("DATABASE_URL", "")
for _required in ("DATABASE_URL", "CELERY_BROKER_URL"):  # unset: `make run`'s local servers
    if PRODUCTION and not os.environ.get(_required):
        raise RuntimeError(f"{_required} must be set when HOOKSVC_ENV=production")
DATABASES: dict[str, dict[str, Any]] = {
    # Without a URL: the local PostgreSQL of `make run`, on its Unix socket under DATA_DIR.
    "default": dburl.parse(_DATABASE_URL) if _DATABASE_URL else devdb.database(DATA_DIR)
}
#: psycopg prepares a statement only where this is not None, and only through a cursor that
#: binds on the server: the hook path's one query (workflows.hookpath.runs). Django's own
#: cursors bind on the client and never prepare, whatever it is (psycopg ClientCursor).
DB_PREPARE = os.environ.get("HOOKSVC_DB_PREPARE", "on")
if DB_PREPARE not in ("on", "off"):
    raise RuntimeError(f"HOOKSVC_DB_PREPARE must be on or off, got {DB_PREPARE!r}")
DB_PREPARE_THRESHOLD = 0 if DB_PREPARE == "on" else None
DATABASES["default"]["OPTIONS"]["prepare_threshold"] = DB_PREPARE_THRESHOLD
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Sign-in: OpenID Connect (workflows/operators/oidc.py) and local accounts -------------
#: The issuer URL exactly as its tokens' `iss` claim gives it; "" turns single sign-on off.
OIDC_ISSUER = os.environ.get("HOOKSVC_OIDC_ISSUER", "").strip()
OIDC_CLIENT_ID = os.environ.get("HOOKSVC_OIDC_CLIENT_ID", "").strip()
OIDC_CLIENT_SECRET = os.environ.get("HOOKSVC_OIDC_CLIENT_SECRET", "")
OIDC_SCOPES = os.environ.get("HOOKSVC_OIDC_SCOPES", "").split() or ["openid", "email", "profile"]
OIDC_GROUPS_CLAIM = os.environ.get("HOOKSVC_OIDC_GROUPS_CLAIM", "").strip() or "groups"
OIDC_CA_FILE = os.environ.get("HOOKSVC_OIDC_CA_FILE", "")
#: The provider as the sign-in button names it: "Sign in with <this>".
OIDC_DISPLAY_NAME = os.environ.get("HOOKSVC_OIDC_DISPLAY_NAME", "").strip() or "single sign-on"
#: Take the e-mail claim without `email_verified` (workflows.operators.identities.verified_email).
OIDC_TRUST_UNVERIFIED_EMAIL = os.environ.get("HOOKSVC_OIDC_TRUST_UNVERIFIED_EMAIL", "") == "1"
if OIDC_ISSUER:
    if not OIDC_ISSUER.startswith("https://"):
        raise RuntimeError(f"HOOKSVC_OIDC_ISSUER must be an https:// URL, got {OIDC_ISSUER!r}")
    if not OIDC_CLIENT_ID:
        raise RuntimeError("HOOKSVC_OIDC_CLIENT_ID must be set with HOOKSVC_OIDC_ISSUER")
    if "openid" not in OIDC_SCOPES:
        raise RuntimeError(
            f"HOOKSVC_OIDC_SCOPES must include openid, got {' '.join(OIDC_SCOPES)!r}"
        )
_local_login = os.environ.get("HOOKSVC_LOCAL_LOGIN", "") or "1"
if _local_login not in ("0", "1"):
    raise RuntimeError(f"HOOKSVC_LOCAL_LOGIN must be 1 or 0, got {_local_login!r}")
#: Local accounts (their passwords, their sessions, their rights) count only while this is on.
LOCAL_LOGIN = _local_login == "1"
if not LOCAL_LOGIN and not OIDC_ISSUER:
    raise RuntimeError("HOOKSVC_LOCAL_LOGIN=0 needs HOOKSVC_OIDC_ISSUER: nobody could sign in")
#: The audiences the REST API accepts in the provider's own tokens
#: (workflows/operators/bearer.py); none given: the client ID.
OIDC_API_AUDIENCES = os.environ.get("HOOKSVC_OIDC_API_AUDIENCE", "").split()
#: The role rules (workflows/operators/roles.py); "": people who sign in get no role.
ROLES_FILE = os.environ.get("HOOKSVC_ROLES_FILE", "")
AUTHENTICATION_BACKENDS = [
    *(["django.contrib.auth.backends.ModelBackend"] if LOCAL_LOGIN else []),
    *(["workflows.operators.oidc.Backend"] if OIDC_ISSUER else []),
]
LOGIN_URL = "admin:login"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
#: Times in the admin's own lists as on hooksvc's pages, with their zone (hooksvc/formats).
FORMAT_MODULE_PATH = ["hooksvc.formats"]
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# gunicorn serves the admin too, so the admin's own static files are served by WhiteNoise,
# found where the apps keep them: nothing is collected (no STATIC_ROOT), in the image or here.
STATIC_ROOT = None
WHITENOISE_USE_FINDERS = True

# The service only speaks HTTPS, so cookies never travel in the clear.
SESSION_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Browsers (the admin's users) must never fall back to plain HTTP for this host, nor for
# names under it (HSTS subdomains are those of this host, never its siblings).
SECURE_HSTS_SECONDS = 365 * 24 * 3600
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SILENCED_SYSTEM_CHECKS = [
    # security.W021 asks for HSTS preload: the preload list is for public domains submitted
    # to browser vendors; hooksvc is an in-cluster service with no public name to submit.
    "security.W021",
    # security.W008 asks for SECURE_SSL_REDIRECT: gunicorn listens only with TLS (there is
    # no plain-HTTP port to redirect from), and behind TLS a redirect would never fire.
    "security.W008",
]

# The operator REST API (workflows/api/): its credentials, errors as problem details,
# throttling per caller, pagination, and the OpenAPI document drf-spectacular generates.
API_RATE = os.environ.get("HOOKSVC_API_RATE", "") or "600/min"
if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|min|minute|hour|day)", API_RATE):
    raise RuntimeError(
        f"HOOKSVC_API_RATE must be like 600/min (N/s, /min, /hour, /day), got {API_RATE!r}"
    )
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "workflows.api.auth.BearerAuthentication",
        "workflows.api.auth.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["workflows.api.auth.SignedIn"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["workflows.api.parsing.JSONParser"],
    "DEFAULT_METADATA_CLASS": "workflows.api.parsing.Metadata",
    "DEFAULT_THROTTLE_CLASSES": ["workflows.api.throttling.PerCaller"],
    "DEFAULT_THROTTLE_RATES": {"caller": API_RATE},
    "DEFAULT_PAGINATION_CLASS": "workflows.api.paging.Pages",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "workflows.api.problems.handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "hooksvc operator API",
    "DESCRIPTION": "The fleet, runs, operator actions, bypasses, templates and add-on profiles,"
    " under the roles of the admin (docs/api.md).",
    "VERSION": "v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "HookEnum": "workflows.api.shapes.HOOKS",
        "MomentEnum": "workflows.api.shapes.MOMENTS",
        "RunStateEnum": "workflows.api.shapes.RUN_STATES",
        "StepStateEnum": "workflows.api.shapes.STEP_STATES",
        "DisplayStateEnum": "workflows.api.shapes.DISPLAY_STATES",
        "WayOutActionEnum": "workflows.api.clusters.WAY_OUT_ACTIONS",
        "BulkActionEnum": "workflows.api.shapes.BULK_ACTIONS",
    },
    "DISABLE_ERRORS_AND_WARNINGS": False,
}
#: The throttle's counts: in Redis when the broker is Redis (every web process counts
#: together), else in each process's memory (`make run`'s one process).
CACHES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}
if os.environ.get("CELERY_BROKER_URL", "").startswith(("redis://", "rediss://")):
    CACHES["default"] = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": os.environ["CELERY_BROKER_URL"],
        "KEY_PREFIX": "hooksvc-cache",
        # A Redis that does not answer costs a request two seconds, not a hang; the
        # throttle then lets requests through (workflows.api.throttling).
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }

# Celery: PostgreSQL is the source of truth, the broker only carries wake-ups. Redis in
# production and in `make run` alike (its local one: hooksvc.devbroker), for the same
# transport's semantics: late acknowledgement, redelivery, the worker's own countdowns.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "") or devbroker.url(DATA_DIR)
# A delivered-but-unacknowledged message comes back after this long; the reconciler usually
# re-enqueues lost work much sooner.
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {"visibility_timeout": 3600}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 4
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# In development (make run, tests) what a worker prints stays text: logged, a crash's
# traceback became one "celery.redirected" record per fragment (1,900 lines for one crash).
CELERY_WORKER_REDIRECT_STDOUTS = PRODUCTION
# Celery's Django fixup closes the database connection before and after every task unless
# this is set: a new PostgreSQL connection per poll was a sixth of a worker's CPU. Workers
# keep it instead, and hooksvc.celery closes it the way Django does after a request
# (CONN_MAX_AGE passed, or an error left it unusable).
CELERY_DB_REUSE_MAX = 1000
# A hook call enqueues after it has recorded the run: if Redis is down, give up fast and
# let the reconciler enqueue later, instead of making CAPI wait.
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2}
#: What a blocking hook answers while it holds: `computed` (the time until the run can next
#: change, at most the template's retryAfterSeconds) or `fixed` (the template's).
RETRY_AFTER = os.environ.get("HOOKSVC_RETRY_AFTER", "computed")
if RETRY_AFTER not in ("computed", "fixed"):
    raise RuntimeError(f"HOOKSVC_RETRY_AFTER must be computed or fixed, got {RETRY_AFTER!r}")
#: A hook call whose runs are about to change within this many seconds waits for it
#: (hooksvc.serving.views, workflows.hookpath.retry.linger_until); 0: never. Far below CAPI's
#: call timeout (10 s unless the handler says otherwise: cluster-api
#: api/runtime/hooks/v1alpha1/discovery_types.go DefaultHandlersTimeoutSeconds).
HOOK_LINGER_SECONDS = _number("HOOKSVC_HOOK_LINGER_SECONDS", 1, zero=True)
if HOOK_LINGER_SECONDS > 5:
    raise RuntimeError(f"HOOKSVC_HOOK_LINGER_SECONDS must be at most 5, got {HOOK_LINGER_SECONDS}")
#: At most this many calls linger at once per web process (it has HOOKSVC_WEB_THREADS).
HOOK_LINGER_CALLS = int(_number("HOOKSVC_HOOK_LINGER_CALLS", 4, zero=True))
#: How often beat sends the batch poller: a batched poll happens up to this long after it is due.
POLL_BATCH_SECONDS = _number("HOOKSVC_POLL_BATCH_SECONDS", 1)
CELERY_BEAT_SCHEDULE = {
    "reconcile": {
        "task": "workflows.reconcile",
        "schedule": _number("HOOKSVC_RECONCILE_SECONDS", 15),
    },
    # A batch message that waited longer than this is dropped: a newer one does its work.
    "poll-due": {
        "task": "workflows.poll_due",
        "schedule": POLL_BATCH_SECONDS,
        "options": {"expires": 10},
    },
    "prune-hook-calls": {"task": "workflows.prune_hook_calls", "schedule": 3600.0},
}
HOOK_CALL_RETENTION_DAYS = _number("HOOKSVC_HOOK_CALL_RETENTION_DAYS", 7)
#: Hook call records (a best-effort audit trail) are buffered and written this often.
HOOK_CALL_FLUSH_SECONDS = _number("HOOKSVC_HOOK_CALL_FLUSH_SECONDS", 0.2, zero=True)

ADMIN_PORT = int(os.environ.get("HOOKSVC_ADMIN_PORT", "0")) or None
#: A bearer token /metrics requires; empty: none (restrict the port instead).
METRICS_TOKEN = os.environ.get("HOOKSVC_METRICS_TOKEN", "")

TLS_DIR = Path(os.environ.get("HOOKSVC_TLS_DIR", DATA_DIR / "tls"))
TLS_CLIENT_AUTH = os.environ.get("HOOKSVC_TLS_CLIENT_AUTH", "") == "1"

#: Hook endpoints live under this prefix (an ExtensionConfig's clientConfig.service.path).
HOOKS_PATH_PREFIX = os.environ.get("HOOKSVC_PATH_PREFIX", "").strip("/")
#: Per-hook overrides of the discovery entries, as JSON (validated at startup).
HOOKS_HANDLERS = os.environ.get("HOOKSVC_HANDLERS", "")
#: Optional hook families served beside the lifecycle hooks (hooksvc.contract.handlers):
#: `InPlaceUpdates`, `UpgradePlan`; none by default (CAPI lets one extension register for
#: the in-place hooks).
OPTIONAL_HOOKS = os.environ.get("HOOKSVC_OPTIONAL_HOOKS", "")

#: How late a wake-up must be before the reconciler re-enqueues it (countdowns go first).
RECONCILE_GRACE_SECONDS = _number("HOOKSVC_RECONCILE_GRACE_SECONDS", 30)

#: Batched polls (workflows.engine.polls): at most this many steps per batch, owned this long.
POLL_BATCH_SIZE = max(1, int(_number("HOOKSVC_POLL_BATCH_SIZE", 100)))
POLL_LEASE_SECONDS = _number("HOOKSVC_POLL_LEASE_SECONDS", 60)
#: A step attempt's lease (workflows.engine.leases) lasts its call's bound and this long more;
#: renewed only when an outcome waits past it to be recorded.
STEP_LEASE_SECONDS = _number("HOOKSVC_STEP_LEASE_SECONDS", 60)
#: Worker liveness (workflows.engine.workers): a process holding leases beats this often, and
#: one whose beat is older than WORKER_DEAD_SECONDS is dead (its leases are freed).
WORKER_BEAT_SECONDS = _number("HOOKSVC_WORKER_BEAT_SECONDS", 2)
WORKER_DEAD_SECONDS = _number("HOOKSVC_WORKER_DEAD_SECONDS", 10)
if WORKER_DEAD_SECONDS < 2 * WORKER_BEAT_SECONDS:
    raise RuntimeError(
        "HOOKSVC_WORKER_DEAD_SECONDS must be at least twice HOOKSVC_WORKER_BEAT_SECONDS"
    )
#: Step calls abandoned at their bound whose threads still run (workflows.engine.calls): past
#: this many, a prefork pool process asks to be replaced once its task is done.
STEP_THREADS_MAX_ABANDONED = int(_number("HOOKSVC_STEP_THREADS_MAX_ABANDONED", 4, zero=True))
#: A step whose attempts end without an outcome this many times in a row (its worker died
#: running it each time) fails (workflows.engine.lifecycle.before_call).
STEP_LOST_ATTEMPTS = max(1, int(_number("HOOKSVC_STEP_LOST_ATTEMPTS", 3)))
#: A waiting step due at least this far ahead gets no countdown message
#: (workflows.engine.lifecycle.needs_countdown).
POLL_BATCH_MIN_WAIT_SECONDS = _number("HOOKSVC_POLL_BATCH_MIN_WAIT_SECONDS", 5, zero=True)

#: The environment variables an `http` step's headersFromEnv may send (workflows.steps.http);
#: any other is refused when a template is validated and when the step runs.
HTTP_ENV_ALLOWLIST = frozenset(
    name.strip()
    for name in os.environ.get("HOOKSVC_HTTP_ENV_ALLOWLIST", "").split(",")
    if name.strip()
)
#: Modules imported at startup so that their @step_type registrations exist.
STEP_MODULES = [m for m in os.environ.get("HOOKSVC_STEP_MODULES", "").split(",") if m]
#: The management cluster's kubeconfig when not running in a Pod (workflows.kube.k8s reads it per
#: call). Only the first file of a $KUBECONFIG list is used: kubectl's merging is not emulated.
KUBECONFIG_PATH = Path(
    os.environ.get("HOOKSVC_KUBECONFIG")
    or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    or Path.home() / ".kube" / "config"
)
#: Where the watcher's leader Lease lives; empty: the Pod's namespace (controllers.leader).
WATCHER_LEASE_NAMESPACE = os.environ.get("HOOKSVC_WATCHER_LEASE_NAMESPACE", "")
#: The helm binary of the add-on steps' charts; empty: looked up (workflows.steps.helm).
HELM_BINARY = os.environ.get("HOOKSVC_HELM", "")
HELM_TIMEOUT_SECONDS = _number("HOOKSVC_HELM_TIMEOUT_SECONDS", 300)

LOG_FORMAT = os.environ.get("HOOKSVC_LOG_FORMAT", "json" if PRODUCTION else "text")
LOG_LEVEL = os.environ.get("HOOKSVC_LOG_LEVEL", "INFO").upper()
#: Celery writes a line per message: beat's "Sending due task", the worker's "Task ...
#: received" and "Task ... succeeded". The batch poller and the reconciler alone made an
#: idle server write ~110 such lines per 30 s, none about a run; hooksvc logs what its tasks
#: did that matters (run_started, step_failed, reconciled, ...). Errors still show; at
#: HOOKSVC_LOG_LEVEL=DEBUG the routine lines do too.
_CELERY_ROUTINE = ("celery.beat", "celery.worker.strategy", "celery.app.trace")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "hooksvc.logs.JSONFormatter"},
        "text": {
            "()": "hooksvc.logs.TextFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        name: {"level": "DEBUG" if LOG_LEVEL == "DEBUG" else "WARNING"} for name in _CELERY_ROUTINE
    },
}
