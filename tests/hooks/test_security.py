"""Security settings and authentication: what `check --deploy` and an anonymous client see.

Covers: `manage.py check --deploy` clean with production settings (in a subprocess, as
the image runs it), only the two reasoned checks silenced, secure cookies and headers on
a real answer, every admin URL behind a login, and DRF's defaults refusing anonymous
callers for any API view that does not opt out the way the hook views do. TLS 1.2 and
mutual TLS are in test_https.py.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client, RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tests.support import servers


def _production_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "hooksvc.settings",
        "HOOKSVC_ENV": "production",
        "HOOKSVC_SECRET_KEY": secrets.token_urlsafe(50),
        "HOOKSVC_DATA_DIR": str(tmp_path),
        # Production requires both (hooksvc.settings); `check` connects to neither.
        "DATABASE_URL": "postgres://hooksvc@db.invalid:5432/hooksvc",
        "CELERY_BROKER_URL": "redis://redis.invalid:6379/0",
    }


def test_check_deploy_is_clean_with_production_settings(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=servers.ROOT,
        env=_production_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_only_the_reasoned_deploy_checks_are_silenced() -> None:
    # W008 (SSL redirect: there is no plain-HTTP port) and W021 (HSTS preload list).
    assert sorted(settings.SILENCED_SYSTEM_CHECKS) == ["security.W008", "security.W021"]


def test_production_refuses_to_start_without_a_secret_key(tmp_path: Path) -> None:
    env = _production_env(tmp_path)
    del env["HOOKSVC_SECRET_KEY"]
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=servers.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "HOOKSVC_SECRET_KEY must be set" in result.stderr


@pytest.mark.django_db
def test_the_login_page_sets_secure_cookies_and_headers(client: Client) -> None:
    response = client.get("/admin/login/", secure=True)
    assert response.status_code == 200
    csrf = response.cookies[settings.CSRF_COOKIE_NAME]
    assert csrf["secure"]
    assert response["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"


def _admin_paths(
    patterns: list[URLPattern | URLResolver] | None = None, prefix: str = ""
) -> Iterator[str]:
    """Every admin URL, its parameters filled with plausible values."""
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _admin_paths(entry.url_patterns, route)
        elif route.startswith("admin/"):
            route = re.sub(r"<int:\w+>|<path:\w+>|\(\?P<\w+>[^)]*\)", "1", route)
            yield "/" + re.sub(r"<(str:)?\w+>", "x", route).lstrip("^").rstrip("$")


#: Admin pages an anonymous person may open: the login form, and Django's public
#: redirect for an object's "view on site" link (it only redirects for models that have
#: get_absolute_url; ours have none, so it answers 404).
PUBLIC_ADMIN = {"/admin/login/", "/admin/r/1/1/"}


@pytest.mark.django_db
def test_every_admin_url_sends_an_anonymous_client_to_the_login(client: Client) -> None:
    paths = sorted(set(_admin_paths()) - PUBLIC_ADMIN)
    assert len(paths) > 20, paths  # the run, template and hook-call admins are all here
    for path in paths:
        response = client.get(path, secure=True)
        if response.status_code == 404:
            continue  # a catch-all or an object that does not exist: nothing shown
        assert response.status_code in (302, 405), (path, response.status_code)
        if response.status_code == 302:
            # Logging out when not logged in goes back to the (login-guarded) index.
            allowed = ("/admin/login/",) + (("/admin/",) if path == "/admin/logout/" else ())
            assert response["Location"].startswith(allowed), (path, response["Location"])


class _DefaultsView(APIView):
    """An API view that keeps REST_FRAMEWORK's default authentication and permissions."""

    def get(self, request: Request) -> Response:
        return Response({"secret": "data"})


@pytest.mark.django_db
def test_drf_defaults_refuse_an_anonymous_caller() -> None:
    request = RequestFactory().get("/api/anything", secure=True)
    response = _DefaultsView.as_view()(request)
    # Asked for a credential (the REST API's bearer or session: workflows/api/auth.py).
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="hooksvc"'
    assert "secret" not in response.rendered_content.decode()
