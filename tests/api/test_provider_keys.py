"""The identity provider's keys, e-mails and people, as a provider and an attacker use them.

Covers: a provider that rotates its signing key without naming it (`kid`) is followed at the
next token, for sign-in's ID tokens and the API's bearer JWTs alike, and forged tokens make
hooksvc fetch the keys at most once per KEYS_REFRESH_SECONDS; an e-mail claim the provider
did not verify names nobody; an API token made by a person stops with that person.

Why the rotation needed work: authlib 1.9 fetches a provider's JWKS again only when a token
names a key ID the cache lacks (authlib/integrations/base_client/sync_openid.py,
OpenIDMixin.parse_id_token: `except InvalidKeyIdError` -> fetch_jwk_set(force=True)), and
joserfc verifies a token without `kid` with the set's one key (joserfc/_keys.py,
KeySet.get_by_kid: no kid and one key -> that key): a bad signature, no refresh.

The provider here is a small HTTPS server of the test's (discovery and JWKS, the way a
provider publishes them), so that the test holds the keys and rotates them.
"""

from __future__ import annotations

import dataclasses
import datetime
import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import override_settings
from joserfc import jwt
from joserfc.jwk import RSAKey

from tests.api.conftest import Api, make_token, problem
from tests.identity.conftest import sign_in
from tests.support import oidc as support_oidc
from tests.support import servers
from workflows import clock
from workflows.models import Identity
from workflows.operators import access, identities, oidc, tokens

pytestmark = pytest.mark.django_db


class _Provider:
    """Discovery and a JWKS over HTTPS; `rotate()` replaces the signing key."""

    def __init__(self, tls: servers.TLSFiles) -> None:
        self.key = RSAKey.generate_key(2048)
        self.jwks_fetches = 0
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    body: dict[str, Any] = {
                        "issuer": provider.issuer,
                        "jwks_uri": f"{provider.issuer}/jwks",
                        "authorization_endpoint": f"{provider.issuer}/authorize",
                        "token_endpoint": f"{provider.issuer}/token",
                        "id_token_signing_alg_values_supported": ["RS256"],
                    }
                elif self.path == "/jwks":
                    provider.jwks_fetches += 1
                    # Published without `kid`, as the providers that sign without one do.
                    public = provider.key.as_dict(private=False)
                    public.pop("kid", None)
                    body = {"keys": [public]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("localhost", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.server_dir / "tls.crt", tls.server_dir / "tls.key")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.issuer = f"https://localhost:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def rotate(self) -> None:
        self.key = RSAKey.generate_key(2048)

    def token(self, sub: str, *, key: RSAKey | None = None, **claims: Any) -> str:
        """A JWT of `sub` signed by the current key (or `key`), with no `kid` in its header."""
        now = int(clock.now().timestamp())
        payload = {
            "iss": self.issuer,
            "aud": "hooksvc",
            "sub": sub,
            "iat": now,
            "exp": now + 600,
            "groups": ["platform"],
            **claims,
        }
        return jwt.encode({"alg": "RS256"}, payload, key or self.key)


@pytest.fixture
def rotating(tls_files: servers.TLSFiles, rules_file: Any) -> Iterator[_Provider]:
    running = _Provider(tls_files)
    running.thread.start()
    with override_settings(
        OIDC_ISSUER=running.issuer,
        OIDC_CLIENT_ID="hooksvc",
        OIDC_CLIENT_SECRET="client-secret-for-tests",
        OIDC_CA_FILE=str(tls_files.ca_file),
        ROLES_FILE=str(rules_file),
    ):
        yield running
    running.server.shutdown()
    running.server.server_close()


def test_a_key_rotated_without_kid_is_followed_by_the_api_at_the_next_token(
    rotating: _Provider, api: Api
) -> None:
    assert api(rotating.token("sub-pat")).get("/api/v1/me/").status_code == 200
    rotating.rotate()
    after = api(rotating.token("sub-pat")).get("/api/v1/me/")
    assert after.status_code == 200, after.content
    assert rotating.jwks_fetches == 2, "fetched at the first token and once after the rotation"


def test_a_key_rotated_without_kid_is_followed_at_sign_in(rotating: _Provider) -> None:
    """The callback verifies the ID token with the client's parse_id_token, as here."""

    def id_token() -> dict[str, Any]:
        return {"id_token": rotating.token("sub-pat", nonce="n-1"), "access_token": "opaque"}

    assert oidc.claims_of(id_token(), nonce="n-1")["sub"] == "sub-pat"
    rotating.rotate()
    assert oidc.claims_of(id_token(), nonce="n-1")["sub"] == "sub-pat"
    assert rotating.jwks_fetches == 2


def test_forged_tokens_fetch_the_keys_at_most_once_per_interval(
    rotating: _Provider, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(oidc, "KEYS_REFRESH_SECONDS", 3600.0)
    assert api(rotating.token("sub-pat")).get("/api/v1/me/").status_code == 200
    stranger = RSAKey.generate_key(2048)
    for _ in range(5):
        forged = api(rotating.token("sub-pat", key=stranger)).get("/api/v1/me/")
        assert (forged.status_code, problem(forged)["code"]) == (401, "token_invalid")
    assert rotating.jwks_fetches == 2, "one refresh for five forged tokens"
    # The interval also holds a real rotation back until it has passed: the cost of the bound.
    rotating.rotate()
    assert api(rotating.token("sub-pat")).get("/api/v1/me/").status_code == 401
    monkeypatch.setattr(oidc, "_refreshed", [0.0])
    assert api(rotating.token("sub-pat")).get("/api/v1/me/").status_code == 200


def test_an_unverified_email_names_nobody_on_the_api(rotating: _Provider, api: Api) -> None:
    """OpenID Connect Core 1.0 section 5.1: email_verified is true only when the provider
    verified the address; a provider that lets people type one would let them be anyone."""
    claimed = rotating.token("sub-mallory", email="pat@example.com", email_verified=False)
    me = api(claimed).get("/api/v1/me/").json()
    assert (me["name"], me["email"]) == ("api:sub-mallory", "")
    missing = api(rotating.token("sub-mallory", email="pat@example.com")).get("/api/v1/me/")
    assert missing.json()["email"] == ""
    verified = rotating.token("sub-pat", email="pat@example.com", email_verified=True)
    assert api(verified).get("/api/v1/me/").json()["name"] == "api:pat@example.com"
    with override_settings(OIDC_TRUST_UNVERIFIED_EMAIL=True):
        assert api(claimed).get("/api/v1/me/").json()["email"] == "pat@example.com"


@pytest.mark.parametrize(
    ("claims", "email"),
    [
        ({"email": "a@x.example", "email_verified": True}, "a@x.example"),
        ({"email": "a@x.example", "email_verified": "true"}, "a@x.example"),
        ({"email": "a@x.example", "email_verified": False}, ""),
        ({"email": "a@x.example", "email_verified": "false"}, ""),
        ({"email": "a@x.example"}, ""),
        ({"email_verified": True}, ""),
    ],
)
def test_only_a_verified_email_is_taken(claims: dict[str, Any], email: str) -> None:
    assert identities.verified_email(claims) == email


def test_an_unverified_email_at_sign_in_names_the_person_by_subject(
    signin: support_oidc.Provider,
) -> None:
    signin.user("sub-mallory", email="pat@example.com", groups=["sre"])
    sign_in(Client(), signin, "sub-mallory")
    identity = Identity.objects.select_related("user").get(subject="sub-mallory")
    assert (identity.user.username, identity.user.email, identity.email) == ("sub-mallory", "", "")


def test_a_token_made_by_a_person_stops_when_they_are_deactivated(api: Api) -> None:
    person = User.objects.create_user("pat@example.com", email="pat@example.com")
    Identity.objects.create(
        user=person, issuer="https://idp.example", subject="sub-pat", signed_in_at=clock.now()
    )
    local = User.objects.create_superuser("ops", "ops@example.com", "pw-" * 4)
    made: dict[str, str] = {}
    for name, maker in (
        ("by-person", identities.actor_of_user(person)),
        ("by-local", identities.actor_of_user(local)),
    ):
        made[name] = tokens.token_create(
            name=name,
            role_names=["viewer"],
            namespaces=None,
            lifetime=datetime.timedelta(days=1),
            # The person made it as an admin (their grants then do not matter here).
            actor=dataclasses.replace(maker, grants=access.EVERYTHING),
        ).secret
    made["by-cli"] = make_token("by-cli", ["viewer"])  # manage.py, no person behind it
    assert {n: api(s).get("/api/v1/me/").status_code for n, s in made.items()} == dict.fromkeys(
        made, 200
    )
    User.objects.filter(pk__in=[person.pk, local.pk]).update(is_active=False)
    refused = {n: api(s).get("/api/v1/me/") for n, s in made.items()}
    assert {n: r.status_code for n, r in refused.items()} == {
        "by-person": 401,
        "by-local": 401,
        "by-cli": 200,
    }
    assert problem(refused["by-person"])["code"] == "token_revoked"
    assert "whose account is deactivated" in problem(refused["by-local"])["detail"]
