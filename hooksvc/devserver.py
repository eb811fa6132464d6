"""`make run`: the whole service in one command, on an embedded default setup.

Creates the development certificates, migrates the database, prints what an
ExtensionConfig needs (the CA bundle and handler names), then runs gunicorn (HTTPS) and
a Celery worker with an embedded beat until interrupted. With DATABASE_URL and
CELERY_BROKER_URL set, the same command runs against PostgreSQL and Redis.
"""

from __future__ import annotations

import base64
import os
import signal

# bandit B404: `make run` starts its own gunicorn and Celery processes.
import subprocess  # nosec B404
import sys
import time
from collections.abc import Mapping
from typing import Any

_CREATE_HINT = (
    "create one with `.venv/bin/python manage.py createsuperuser`, or set "
    "HOOKSVC_ADMIN_USERNAME and HOOKSVC_ADMIN_PASSWORD before `make run`"
)


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


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hooksvc.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from hooksvc import devcerts, handlers

    hosts = tuple(h for h in os.environ.get("HOOKSVC_DEV_CERT_HOSTS", "").split(",") if h)
    devcerts.ensure(settings.TLS_DIR, hosts=hosts + devcerts.DEFAULT_HOSTS)
    call_command("migrate", interactive=False, verbosity=0)

    ca_bundle = base64.b64encode((settings.TLS_DIR / "ca.crt").read_bytes()).decode()
    bind = os.environ.get("HOOKSVC_BIND", "0.0.0.0:9443")
    port = bind.rsplit(":", 1)[-1]
    prefix = f"/{settings.HOOKS_PATH_PREFIX}" if settings.HOOKS_PATH_PREFIX else ""
    print(
        f"hooksvc serves https://localhost:{port}{prefix}/hooks.runtime.cluster.x-k8s.io/v1alpha1/"
    )
    print(f"CA bundle for the ExtensionConfig's clientConfig.caBundle:\n  {ca_bundle}")
    print("Handlers:", ", ".join(f"{h.name} ({h.hook.name})" for h in handlers.configured()))
    notice = ensure_admin(os.environ)
    if notice:
        print(notice)
    sys.stdout.flush()

    python = sys.executable
    data_dir = str(settings.DATA_DIR)
    commands = [
        [python, "-m", "gunicorn", "-c", "python:hooksvc.gunicorn_conf", "hooksvc.wsgi"],
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
            os.path.join(data_dir, "celerybeat-schedule"),
            "--concurrency",
            "2",
        ],
    ]
    env = {**os.environ, "HOOKSVC_BIND": bind}
    # bandit B603: fixed argument lists built above from sys.executable; no shell, no input.
    children = [subprocess.Popen(cmd, env=env) for cmd in commands]  # nosec B603

    def stop(signum: int, frame: Any) -> None:
        for child in children:
            if child.poll() is None:
                child.terminate()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    # Serve until either child exits, then stop the other.
    while all(child.poll() is None for child in children):
        time.sleep(0.5)
    stop(signal.SIGTERM, None)
    return max(child.wait() for child in children)


if __name__ == "__main__":
    sys.exit(main())
