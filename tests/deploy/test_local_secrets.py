"""What `make run` writes is the operator's alone, and its logs carry no credentials.

Covers: the secret key and the TLS keys are 0600 from the moment they exist (written through
os.open with the mode; chmod is never needed, which the tests hold by making chmod fail, under
umask 0); the children's log files under var/log are 0600 in a 0700 directory; a request's
query string reaches no log line, neither from Django's own records (their `request` extra's
repr is the full URL: django/http/request.py HttpRequest.__repr__ -> get_full_path()) nor
from what a child prints.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pathlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client

from hooksvc import logs
from hooksvc import settings as hooksvc_settings
from hooksvc.serving import devcerts, terminal

TOKEN = "hsv_Xq7Lm2Tz9Rb4Wc8Nd1Fk"


@pytest.fixture
def no_chmod(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """umask 0, and chmod refused: a file must be made with its mode, not narrowed after."""

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"chmod after creation: {args}")

    monkeypatch.setattr(os, "chmod", refused)
    monkeypatch.setattr(pathlib.Path, "chmod", refused)
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.usefixtures("no_chmod")
def test_the_secret_key_is_0600_from_its_creation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hooksvc_settings, "DATA_DIR", tmp_path)
    key = hooksvc_settings._secret_key()
    assert len(key) > 40 and _mode(tmp_path / "secret_key") == 0o600
    assert hooksvc_settings._secret_key() == key, "kept for the next process"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret_key"]


@pytest.mark.usefixtures("no_chmod")
def test_the_tls_keys_are_0600_from_their_creation(tmp_path: Path) -> None:
    assert devcerts.ensure(tmp_path / "tls")
    modes = {p.name: _mode(p) for p in (tmp_path / "tls").iterdir()}
    assert modes == {"tls.key": 0o600, "ca.key": 0o600, "tls.crt": 0o644, "ca.crt": 0o644}


def test_a_childs_log_is_the_operators_alone_and_holds_no_query(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    log_dir.mkdir(mode=0o755)
    (log_dir / "gunicorn.log").write_text("from an earlier release\n")
    (log_dir / "gunicorn.log").chmod(0o644)
    printed = f"GET /api/v1/runs/?access_token={TOKEN}&limit=5 HTTP/1.1\n".encode()
    screen = io.StringIO()
    relay = terminal.Relay(io.BytesIO(printed), log_dir / "gunicorn.log", screen)
    relay.start()
    relay.thread.join(timeout=30)
    assert not relay.thread.is_alive()
    assert (_mode(log_dir), _mode(log_dir / "gunicorn.log")) == (0o700, 0o600)
    written = (log_dir / "gunicorn.log").read_text()
    for text in (written, screen.getvalue()):
        assert TOKEN not in text
        assert "/api/v1/runs/?access_token=[redacted]&limit=[redacted]" in text


@pytest.mark.django_db
@pytest.mark.parametrize("formatter", [logs.JSONFormatter(), logs.TextFormatter()])
def test_djangos_request_records_are_logged_without_the_query(
    client: Client, caplog: pytest.LogCaptureFixture, formatter: logging.Formatter
) -> None:
    """A token sent in the URL (refused: the API reads only the Authorization header) and an
    OIDC callback's code: Django logs both with the request, whose repr is the full URL."""
    caplog.set_level(logging.WARNING, logger="django.request")
    client.get(f"/api/v1/runs/?access_token={TOKEN}", secure=True)
    client.get(f"/oidc/nothing-here/?code={TOKEN}&state=s1", secure=True)
    records = [r for r in caplog.records if r.name == "django.request"]
    assert records, "Django logged the refused requests"
    lines = [formatter.format(r) for r in records]
    assert all(TOKEN not in line for line in lines), lines
    assert any("GET /api/v1/runs/" in line for line in lines), lines
    if isinstance(formatter, logs.JSONFormatter):
        assert json.loads(lines[0])["request"] == "GET /api/v1/runs/"


def test_every_query_value_in_a_line_is_redacted() -> None:
    line = "callback https://h.example/oidc/callback/?code=abc&state=xyz done? yes=no"
    assert logs.redact_queries(line) == (
        "callback https://h.example/oidc/callback/?code=[redacted]&state=[redacted] done? yes=no"
    )
