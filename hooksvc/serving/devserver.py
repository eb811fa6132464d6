"""`make run`: the whole service in one command, on a machine with nothing but Python.

Without DATABASE_URL it starts the local PostgreSQL under HOOKSVC_DATA_DIR (hooksvc.devdb),
made on the first run and reused by the next, and without CELERY_BROKER_URL the local Redis
beside it (hooksvc.devbroker); records what it serves with for the manage.py beside it
(hooksvc.devrun); creates the development certificates; migrates; prints what an
ExtensionConfig needs (the CA bundle and handler names), the admin's address and how to get a
user; then runs gunicorn (HTTPS), a Celery worker with an embedded beat and the local broker
under a supervisor (hooksvc.serving.supervise) that starts again whichever dies, until SIGTERM
or Ctrl-C; then stops them, then the local PostgreSQL. With DATABASE_URL and CELERY_BROKER_URL
set, the same command runs against those servers. With HOOKSVC_DEV_SIGNIN=1 (`make
run-signin`) it starts a local OpenID Connect provider with sample people first
(hooksvc.serving.devsignin).
"""

from __future__ import annotations

import base64
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from hooksvc import devbroker, devdb, devrun
from hooksvc.serving import devsignin, supervise

_CREATE_HINT = (
    "create one with `.venv/bin/python manage.py createsuperuser` in another shell while"
    " `make run` runs, or set HOOKSVC_ADMIN_USERNAME and HOOKSVC_ADMIN_PASSWORD before"
    " `make run`"
)
#: How long after SIGTERM gunicorn and the worker may take to stop before they are killed,
#: so that `make run` ends within 5 s of it (ARCHITECTURE invariant 9), its broker's and
#: PostgreSQL's stops included. gunicorn takes about a second, an idle worker about as long;
#: a busy one waits for its task. What a kill cuts short comes back: tasks are acknowledged
#: late, and the broker delivers them again.
CHILD_STOP_SECONDS = 3.0
#: The local broker's share of the 5 s: it flushes its append-only file and exits.
BROKER_STOP_SECONDS = 1.0


def ensure_admin(environ: Mapping[str, str]) -> str:
    """Create the superuser the environment names, if it does not exist; say what happened.

    There is no default account: without both variables this only tells how to create
    one. An existing user is left as it is. The password is never part of the message.
    """
    from django.contrib.auth import get_user_model, password_validation
    from django.core.exceptions import ValidationError

    users = get_user_model()
    username = environ.get("HOOKSVC_ADMIN_USERNAME", "")
    password = environ.get("HOOKSVC_ADMIN_PASSWORD", "")
    if not (username and password):
        if username or password:
            return f"No admin user created: both variables are needed; {_CREATE_HINT}."
        if users.objects.filter(is_superuser=True).exists():
            return ""
        return f"No admin user yet: {_CREATE_HINT}."
    if users.objects.filter(username=username).exists():
        return f"Admin user {username!r} exists; left as it is."
    try:
        password_validation.validate_password(password, users(username=username))
    except ValidationError as exc:
        problems = " ".join(exc.messages)
        return f"Admin user {username!r} not created: HOOKSVC_ADMIN_PASSWORD: {problems}"
    users.objects.create_superuser(username=username, email="", password=password)
    return f"Created the admin user {username!r} (password from HOOKSVC_ADMIN_PASSWORD)."


def _stop_on_signal(signum: int, frame: FrameType | None) -> None:
    # Until the children run, a signal unwinds setup, whose `finally` stops the local
    # PostgreSQL; the default action would leave it running without this process.
    raise SystemExit(128 + signum)


def main() -> int:
    signal.signal(signal.SIGTERM, _stop_on_signal)
    signal.signal(signal.SIGINT, _stop_on_signal)
    exported = dict(os.environ)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hooksvc.settings")
    import django

    django.setup()
    from django.conf import settings

    data_dir = Path(settings.DATA_DIR)
    other = devrun.running_pid(data_dir)
    if other and other != os.getpid():
        print(f"make run: another `make run` (PID {other}) serves from {data_dir}", file=sys.stderr)
        return 1
    local = None if exported.get("DATABASE_URL") else devdb.Server(data_dir)
    broker = None if exported.get("CELERY_BROKER_URL") else devbroker.Server(data_dir)
    signin: devsignin.Provider | None = None
    try:
        if local is not None:
            print(f"Starting the local PostgreSQL in {local.home} ...", flush=True)
            local.start()
            made = "made it on this first run" if local.created else "its data kept from before"
            if local.moved_to:
                made += f"; in {local.moved_to}, where {devdb.ROOT_STAND_IN} may enter"
            print(f"Local PostgreSQL ready ({made}; stopped when make run stops).")
        if broker is not None:
            broker.start()
            print(f"Local broker ready (Redis on {broker.socket}; stopped when make run stops).")
        if devsignin.wanted(exported):
            _certificates()
            signin, given = devsignin.start(data_dir, settings.TLS_DIR, exported)
            # The web processes get it, and the record tells the manage.py beside them.
            os.environ.update(given)
            exported.update(given)
            print(devsignin.banner(signin), flush=True)
        devrun.write(data_dir, exported, os.getpid())
        try:
            return _serve(broker)
        finally:
            devrun.clear(data_dir, os.getpid())
    except (devdb.Error, devbroker.Error, devsignin.Error) as exc:
        print(f"make run: {exc}", file=sys.stderr)
        return 1
    finally:
        if signin is not None:
            signin.stop()
        # After gunicorn and the worker (stopped by _serve): they use both.
        if broker is not None:
            broker.stop(timeout=BROKER_STOP_SECONDS)
        if local is not None:
            local.stop()


def _serve(broker: devbroker.Server | None) -> int:
    from django.conf import settings
    from django.core.management import call_command

    from hooksvc.contract import handlers

    tls_dir = settings.TLS_DIR
    _certificates()
    call_command("migrate", interactive=False, verbosity=0)

    ca_bundle = base64.b64encode((tls_dir / "ca.crt").read_bytes()).decode()
    bind = os.environ.get("HOOKSVC_BIND", "0.0.0.0:9443")
    port = bind.rsplit(":", 1)[-1]
    prefix = f"/{settings.HOOKS_PATH_PREFIX}" if settings.HOOKS_PATH_PREFIX else ""
    print(
        f"hooksvc serves https://localhost:{port}{prefix}/hooks.runtime.cluster.x-k8s.io/v1alpha1/"
    )
    print(f"CA bundle for the ExtensionConfig's clientConfig.caBundle:\n  {ca_bundle}")
    print("Handlers:", ", ".join(f"{h.name} ({h.hook.name})" for h in handlers.configured()))
    print(
        f"Admin: https://localhost:{settings.ADMIN_PORT or port}/admin/"
        f" (the certificate is signed by {tls_dir / 'ca.crt'})"
    )
    notice = ensure_admin(os.environ)
    if notice:
        print(notice)
    print("Stop with Ctrl-C.")
    sys.stdout.flush()

    python = sys.executable
    env = {
        **os.environ,
        "HOOKSVC_BIND": bind,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        # One server and no load balancer to drain towards: Ctrl-C stops it at once.
        "HOOKSVC_WEB_DRAIN_SECONDS": os.environ.get("HOOKSVC_WEB_DRAIN_SECONDS", "0"),
    }
    holding = "the hook keeps answering from PostgreSQL meanwhile"
    # Everything each process wrote; the terminal gets it with tracebacks folded.
    logs = Path(settings.DATA_DIR) / "log"
    web = supervise.popen_child(
        "gunicorn",
        [python, "-m", "gunicorn", "-c", "python:hooksvc.serving.gunicorn_conf", "hooksvc.wsgi"],
        env,
        log_path=logs / "gunicorn.log",
        meanwhile="CAPI's calls fail until it is back (it calls again)",
    )
    worker = supervise.popen_child(
        "the Celery worker (and beat)",
        [
            python,
            "-m",
            "celery",
            "-A",
            "hooksvc",
            "worker",
            "-B",
            "-l",
            "INFO",
            "-s",
            os.path.join(settings.DATA_DIR, "celerybeat-schedule"),
            "--concurrency",
            "2",
            # Threads, not the image's prefork processes: prefork's warm shutdown alone takes
            # 2-5 s here (each pool process sleeps 1 s on its way out, billiard/pool.py
            # Worker._do_exit), too long for `make run` to stop within 5 s on a busy laptop.
            "--pool",
            "threads",
        ],
        env,
        log_path=logs / "worker.log",
        meanwhile=f"{holding}; its work waits there",
    )
    children = [web, worker]
    if broker is not None:
        children.append(_broker_child(broker, holding))
    supervisor = supervise.Supervisor(children, say=_say)
    stopping: list[float] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        if not stopping:
            stopping.append(time.monotonic())

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        supervisor.start_all()
        while not stopping:
            supervisor.check()
            time.sleep(0.2)
    except supervise.GaveUp as exc:
        _say(str(exc))
        return 1
    finally:
        since = stopping[0] if stopping else time.monotonic()
        # The broker is stopped after them (by main): a worker's warm shutdown gives it back
        # what it had not acknowledged.
        supervisor.stop([web, worker], until=since + CHILD_STOP_SECONDS)
    return 0


def _certificates() -> None:
    from django.conf import settings

    from hooksvc.serving import devcerts

    hosts = tuple(h for h in os.environ.get("HOOKSVC_DEV_CERT_HOSTS", "").split(",") if h)
    devcerts.ensure(settings.TLS_DIR, hosts=hosts + devcerts.DEFAULT_HOSTS)


def _broker_child(broker: devbroker.Server, holding: str) -> supervise.Child:
    """The local broker as a child: started by main, started again here when it dies."""

    def start() -> supervise.Process:
        return broker.start()

    def terminate(process: supervise.Process) -> None:
        broker.stop(timeout=BROKER_STOP_SECONDS)

    return supervise.Child(
        name="the broker (Redis)",
        start=start,
        terminate=terminate,
        meanwhile=holding,
        process=broker.process,
        started_at=time.monotonic(),
    )


def _say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
