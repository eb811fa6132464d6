"""API tokens: made and revoked by an admin (CLI and admin page), kept hashed, scoped like a
role rule, always expiring; an expired, revoked or unknown one is refused with its code."""

from __future__ import annotations

import datetime
import io
import json

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from tests.api.conftest import Api, make_token, problem
from workflows import clock
from workflows.models import ApiToken
from workflows.operators import access, tokens

pytestmark = pytest.mark.django_db


def cli(*args: str) -> str:
    out = io.StringIO()
    call_command("workflows", "token", *args, stdout=out)
    return out.getvalue()


def test_the_cli_makes_a_token_shown_once_and_kept_only_as_its_hash(api: Api) -> None:
    printed = cli("create", "chatops", "--role", "operator", "--namespace", "payments")
    secret = printed.strip().splitlines()[-1]
    assert secret.startswith("hks_") and len(secret) == 47
    token = ApiToken.objects.get(name="chatops")
    assert (token.roles, token.namespaces, token.prefix) == (["operator"], ["payments"], secret[:9])
    assert token.expires_at - token.created_at == datetime.timedelta(days=90)
    assert token.created_by.startswith("cli:")
    # Nowhere in the database in the clear: only its SHA-256.
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(t)::text FROM workflows_apitoken t")
        (row,) = cursor.fetchone()
    assert secret not in row and secret[9:] not in row
    assert token.digest == tokens.digest(secret)
    me = api(secret).get("/api/v1/me/").json()
    assert me["name"] == "token:chatops"
    assert me["grants"] == {
        "view": ["payments"], "operate": ["payments"], "release": [], "edit": []
    }  # fmt: skip
    listed = json.loads(cli("list", "-o", "json"))
    assert [t["name"] for t in listed] == ["chatops"] and secret not in json.dumps(listed)


def test_a_revoked_token_is_refused_at_once(api: Api) -> None:
    secret = make_token("pipeline", ["viewer"])
    assert api(secret).get("/api/v1/runs/").status_code == 200
    assert "token pipeline revoked" in cli("revoke", "pipeline")
    refused = api(secret).get("/api/v1/runs/")
    assert refused.status_code == 401
    assert problem(refused)["code"] == "token_revoked"
    assert refused["WWW-Authenticate"] == 'Bearer realm="hooksvc"'
    with pytest.raises(CommandError, match="was revoked already"):
        cli("revoke", "pipeline")


def test_an_expired_token_is_refused(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = make_token("portal", ["viewer"], lifetime=datetime.timedelta(hours=1))
    assert api(secret).get("/api/v1/runs/").status_code == 200
    later = clock.now() + datetime.timedelta(hours=1, seconds=1)
    monkeypatch.setattr(clock, "now", lambda: later)
    refused = api(secret).get("/api/v1/runs/")
    assert refused.status_code == 401
    assert problem(refused)["code"] == "token_expired"


@pytest.mark.parametrize(
    "credential",
    ["hks_" + "A" * 43, "hks_", "not-a-token", "a.b.c", "hks_" + "x" * 200, "two words"],
)
def test_a_token_hooksvc_did_not_make_is_refused(api: Api, credential: str) -> None:
    make_token("real", ["admin"])
    refused = api(credential).get("/api/v1/runs/")
    assert refused.status_code == 401
    assert problem(refused)["code"] == "token_invalid"


def test_the_last_use_is_recorded_at_most_once_a_minute(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = make_token("bot", ["viewer"])
    start = clock.now()
    monkeypatch.setattr(clock, "now", lambda: start)
    api(secret).get("/api/v1/me/")
    assert ApiToken.objects.get().last_used_at == start
    moments = [start + datetime.timedelta(seconds=30), start + datetime.timedelta(seconds=61)]
    monkeypatch.setattr(clock, "now", lambda: moments[0])
    api(secret).get("/api/v1/me/")
    assert ApiToken.objects.get().last_used_at == start
    monkeypatch.setattr(clock, "now", lambda: moments[1])
    api(secret).get("/api/v1/me/")
    assert ApiToken.objects.get().last_used_at == moments[1]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--role", "editor", "--namespace", "a"], "editor cannot be limited to namespaces"),
        (["--role", "viewer", "--namespace", "Not_A_Namespace"], "not a Kubernetes namespace"),
        (["--role", "viewer", "--expires", "400d"], "at most 366d"),
        (["--role", "viewer", "--expires", "0d"], "more than 0"),
        (["--role", "viewer", "--expires", "soon"], "write it in days and hours"),
    ],
)
def test_a_token_that_cannot_be_made_is_refused_and_nothing_is_written(
    args: list[str], error: str
) -> None:
    with pytest.raises(CommandError, match=error):
        cli("create", "bot", *args)
    assert not ApiToken.objects.exists()


def test_a_name_is_one_token() -> None:
    make_token("bot", ["viewer"])
    with pytest.raises(CommandError, match="a token named 'bot' exists already"):
        cli("create", "bot", "--role", "viewer")


def test_only_an_admin_makes_lists_or_revokes_tokens() -> None:
    User.objects.create_user("olga", password="pw-" * 4, is_staff=True)
    with pytest.raises(CommandError, match="only an admin"):
        cli("create", "bot", "--role", "viewer", "--as", "olga")
    make_token("bot", ["viewer"])
    for args in (["list"], ["revoke", "bot"]):
        with pytest.raises(CommandError, match="only an admin"):
            cli(*args, "--as", "olga")
    operator = access.Actor(name="api:ops", grants={access.Permission.OPERATE: None})
    with pytest.raises(access.Denied):
        tokens.token_create(
            name="x",
            role_names=["viewer"],
            namespaces=None,
            lifetime=datetime.timedelta(days=1),
            actor=operator,
        )


def test_the_admin_page_makes_a_token_shows_it_once_and_revokes_it(api: Api) -> None:
    superuser = User.objects.create_superuser("root", "root@example.com", "pw-" * 4)
    browser = Client()
    browser.force_login(superuser)
    page = browser.post(
        "/admin/workflows/apitoken/add/",
        {"name": "backstage", "roles": ["viewer"], "namespaces": "team-a, team-b", "days": "30"},
        secure=True,
    )
    assert page.status_code == 200
    html = page.content.decode()
    secret = html.split('<pre id="token-secret">')[1].split("</pre>")[0]
    assert api(secret).get("/api/v1/me/").json()["grants"]["view"] == ["team-a", "team-b"]
    listed = browser.get("/admin/workflows/apitoken/", secure=True).content.decode()
    assert "backstage" in listed and secret not in listed
    token = ApiToken.objects.get(name="backstage")
    browser.post(
        "/admin/workflows/apitoken/",
        {"action": "revoke", "_selected_action": [str(token.pk)]},
        secure=True,
    )
    assert problem(api(secret).get("/api/v1/me/"))["code"] == "token_revoked"
    staff = User.objects.create_user("sam", password="pw-" * 4, is_staff=True)
    browser.force_login(staff)
    assert browser.get("/admin/workflows/apitoken/", secure=True).status_code == 403
    assert browser.get("/admin/workflows/apitoken/add/", secure=True).status_code == 403
