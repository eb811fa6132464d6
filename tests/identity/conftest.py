"""Fixtures for sign-in and roles: a real OpenID Connect provider, hooksvc configured for it,
role rules, and people who signed in through it."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.test import Client
from django.test.utils import override_settings

from tests.support import oidc, servers

#: The role rules of these tests (HOOKSVC_ROLES_FILE's format).
RULES = """
rules:
  - group: platform
    roles: [admin]
  - group: team-a-operators
    roles: [operator]
    namespaces: [team-a]
  - group: team-a-viewers
    roles: [viewer]
    namespaces: [team-a]
  - group: sre
    roles: [releaser]
"""
#: Who signs in, with the groups the provider gives them.
PEOPLE = {
    "ann": ["team-a-operators"],
    "vic": ["team-a-viewers"],
    "sam": ["sre"],
    "pat": ["platform", "someone-elses-group"],
    "nobody": ["unknown-group"],
}


@pytest.fixture(scope="session")
def provider(tls_files: servers.TLSFiles) -> Iterator[oidc.Provider]:
    with oidc.provider(tls_files.server_dir) as running:
        for name, groups in PEOPLE.items():
            running.user(
                f"sub-{name}", email=f"{name}@example.com", email_verified=True, groups=groups
            )
        yield running


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "roles.yaml"
    path.write_text(RULES)
    return path


@pytest.fixture
def signin(provider: oidc.Provider, rules_file: Path) -> Iterator[oidc.Provider]:
    """hooksvc configured for the provider, as HOOKSVC_OIDC_* and HOOKSVC_ROLES_FILE do it."""
    with override_settings(
        OIDC_ISSUER=provider.issuer,
        OIDC_CLIENT_ID="hooksvc",
        OIDC_CLIENT_SECRET="client-secret-for-tests",
        OIDC_CA_FILE=str(provider.ca_file),
        ROLES_FILE=str(rules_file),
        AUTHENTICATION_BACKENDS=[
            "django.contrib.auth.backends.ModelBackend",
            "workflows.operators.oidc.Backend",
        ],
    ):
        yield provider


def sign_in(client: Client, provider: oidc.Provider, sub: str, following: str = "/admin/") -> str:
    """Sign `sub` in through the provider as a browser would; where hooksvc sends them after."""
    start = client.get("/admin/oidc/login/", {"next": following}, secure=True)
    assert start.status_code == 302, start.content
    back = urllib.parse.urlsplit(provider.authorize(start["Location"], sub))
    done = client.get(f"{back.path}?{back.query}", secure=True)
    assert done.status_code == 302, done.content.decode()
    location: str = done["Location"]
    return location


#: `person(name)`: a client signed in through the provider as one of PEOPLE.
PersonClient = Callable[[str], Client]


@pytest.fixture
def person(signin: oidc.Provider) -> PersonClient:
    """Signs each of PEOPLE in the first time a test asks for them (a sign-in each)."""
    clients: dict[str, Client] = {}

    def signed_in(name: str) -> Client:
        if name not in clients:
            clients[name] = Client()
            sign_in(clients[name], signin, f"sub-{name}")
        return clients[name]

    return signed_in
