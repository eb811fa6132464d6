"""`make run`: the whole service in one command, on a machine with nothing but Python.

Without DATABASE_URL it starts the local PostgreSQL under HOOKSVC_DATA_DIR (hooksvc.devdb),
made on the first run and reused by the next; creates the development certificates; migrates;
prints what an ExtensionConfig needs (the CA bundle and handler names), the admin's address and
how to get a user; then runs gunicorn (HTTPS) and a Celery worker with an embedded beat until
SIGTERM or Ctrl-C, and stops them, then the local PostgreSQL. With DATABASE_URL and
CELERY_BROKER_URL set, the same command runs against those servers.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal

# bandit B404: `make run` starts its own gunicorn and Celery processes.
import subprocess  # nosec B404
import sys
import time
from collections.abc import Mapping
from types import FrameType

from hooksvc import devdb

_CREATE_HINT = (
    "create one with `.venv/bin/python manage.py createsuperuser` in another shell while"
    " `make run` runs, or set HOOKSVC_ADMIN_USERNAME and HOOKSVC_ADMIN_PASSWORD before"
    " `make run`"
)
#: How long after SIGTERM gunicorn and the worker may take to stop before they are killed,
#: so that `make run` ends within 5 s of it (ARCHITECTURE invariant 9), its PostgreSQL's stop
#: included. gunicorn takes about a second, an idle worker 1.5-3 s: its loop polls the
#: directory broker in 2 s cycles (celery/worker/loops.py, synloop); a busy one waits for its
#: task. What a kill cuts short comes back: tasks are acknowledged late, and the next
#: `make run` delivers them again.
CHILD_STOP_SECONDS = 3.5


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
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hooksvc.settings")
    import django

    django.setup()
    from django.conf import settings

    local = None
    if not os.environ.get("DATABASE_URL"):
        local = devdb.Server(settings.DATA_DIR)
    try:
        if local is not None:
            print(f"Starting the local PostgreSQL in {local.home} ...", flush=True)
            try:
                local.start()
            except devdb.Error as exc:
                print(f"make run: {exc}", file=sys.stderr)
                return 1
            made = "made it on this first run" if local.created else "its data kept from before"
            print(f"Local PostgreSQL ready ({made}; stopped when make run stops).")
        return _serve()
    finally:
        if local is not None:
            local.stop()


def _serve() -> int:
    from django.conf import settings
    from django.core.management import call_command

    from hooksvc.contract import handlers
    from hooksvc.serving import devcerts

    tls_dir = settings.TLS_DIR
    hosts = tuple(h for h in os.environ.get("HOOKSVC_DEV_CERT_HOSTS", "").split(",") if h)
    devcerts.ensure(tls_dir, hosts=hosts + devcerts.DEFAULT_HOSTS)
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
    commands = [
        [python, "-m", "gunicorn", "-c", "python:hooksvc.serving.gunicorn_conf", "hooksvc.wsgi"],
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
    ]
    env = {**os.environ, "HOOKSVC_BIND": bind}
    # Sessions of their own: Ctrl-C reaches only this process, which stops each child once,
    # with SIGTERM (gunicorn's graceful stop, Celery's warm shutdown); a second signal from
    # the terminal would turn Celery's into a cold one.
    # bandit B603: fixed argument lists built above from sys.executable; no shell, no input.
    children = [
        subprocess.Popen(cmd, env=env, start_new_session=True)  # nosec B603
        for cmd in commands
    ]
    stopped: list[subprocess.Popen[bytes]] = []
    deadline: list[float] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        if not deadline:
            deadline.append(time.monotonic() + CHILD_STOP_SECONDS)
        for child in children:
            if child.poll() is None and child not in stopped:
                stopped.append(child)
                child.terminate()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        # Serve until either child exits, then stop the other.
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
    finally:
        stop(signal.SIGTERM, None)
        for name, child in zip(("gunicorn", "the Celery worker"), children, strict=True):
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=max(0.0, deadline[0] - time.monotonic()))
            if child.poll() is None:
                print(f"make run: {name} did not stop within {CHILD_STOP_SECONDS} s: killed")
                # Its process group (its session): the worker's pool processes too.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()
    return max(child.returncode for child in children)


if __name__ == "__main__":
    sys.exit(main())
