"""Single sign-on through a real OpenID Connect provider (oidc-provider-mock on a local port,
over TLS): the code flow, the user it makes, and the tokens it refuses.

What an ID token must satisfy is OpenID Connect Core 1.0 section 3.1.3.7 (issuer equal to the
configured one, audience the client ID, a valid signature by the provider's key, not expired,
the nonce sent); hooksvc has authlib check it (authlib/integrations/base_client/
sync_openid.py, `OpenIDMixin.parse_id_token`, with `authlib.oidc.core.CodeIDToken`), with the
issuer pinned to HOOKSVC_OIDC_ISSUER rather than to whatever the discovery document says.
"""

from __future__ import annotations

import base64
import urllib.parse

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import override_settings
from joserfc.errors import JoseError

from tests.identity.conftest import sign_in
from tests.support import oidc
from workflows.models import Identity
from workflows.operators import access, identities
from workflows.operators import oidc as hooksvc_oidc

pytestmark = pytest.mark.django_db


def test_signing_in_makes_the_user_of_the_subject_with_the_providers_email_and_groups(
    signin: oidc.Provider, client: Client
) -> None:
    assert sign_in(client, signin, "sub-ann", following="/admin/workflows/run/") == (
        "/admin/workflows/run/"
    )
    identity = Identity.objects.select_related("user").get()
    assert (identity.issuer, identity.subject, identity.email, identity.groups) == (
        signin.issuer,
        "sub-ann",
        "ann@example.com",
        ["team-a-operators"],
    )
    user = identity.user
    assert (user.username, user.email, user.is_staff, user.has_usable_password()) == (
        "ann@example.com",
        "ann@example.com",
        False,
        False,
    )
    page = client.get("/admin/")
    assert page.status_code == 200
    assert "ann@example.com" in page.content.decode()


def test_a_second_sign_in_reads_the_groups_again_and_keeps_the_user(
    signin: oidc.Provider, client: Client
) -> None:
    signin.user("sub-eve", email="eve@example.com", email_verified=True, groups=["team-a-viewers"])
    sign_in(client, signin, "sub-eve")
    first = Identity.objects.get(subject="sub-eve")
    signin.user(
        "sub-eve", email="eve@corp.example", email_verified=True, groups=["platform", "sre"]
    )
    sign_in(Client(), signin, "sub-eve")
    again = Identity.objects.get(subject="sub-eve")
    assert again.user_id == first.user_id
    assert (again.email, again.groups, again.user.username) == (
        "eve@corp.example",
        ["platform", "sre"],
        "eve@corp.example",
    )


def test_a_local_account_with_the_same_name_is_never_taken_over(
    signin: oidc.Provider, client: Client
) -> None:
    local = User.objects.create_superuser("ann@example.com", "ann@example.com", "pw-" * 4)
    sign_in(client, signin, "sub-ann")
    identity = Identity.objects.get(subject="sub-ann")
    assert identity.user_id != local.pk
    assert identity.user.username.startswith("ann@example.com~")
    # The provider's ann is an operator in team-a, not the local superuser.
    actor = identities.actor_of_user(identity.user)
    assert actor.may_everywhere(access.Permission.VIEW) is False


def test_a_callback_without_the_sign_ins_state_is_refused(
    signin: oidc.Provider, client: Client
) -> None:
    start = client.get("/admin/oidc/login/", secure=True)
    back = urllib.parse.urlsplit(signin.authorize(start["Location"], "sub-ann"))
    query = urllib.parse.parse_qs(back.query)
    forged = client.get(
        back.path, {"code": query["code"][0], "state": "not-the-state"}, secure=True
    )
    assert forged.status_code == 400
    assert "The sign-in did not complete (mismatching_state)" in forged.content.decode()
    assert not Identity.objects.exists()
    # Another browser's callback (without this session) is refused alike.
    stolen = Client().get(f"{back.path}?{back.query}", secure=True)
    assert stolen.status_code == 400
    assert not Identity.objects.exists()


def test_a_person_who_denies_the_request_at_the_provider_is_not_signed_in(
    signin: oidc.Provider, client: Client
) -> None:
    import requests

    start = client.get("/admin/oidc/login/", secure=True)
    denied = requests.post(
        start["Location"],
        data={"action": "deny"},
        verify=str(signin.ca_file),
        allow_redirects=False,
        timeout=10,
    )
    back = urllib.parse.urlsplit(denied.headers["Location"])
    answer = client.get(f"{back.path}?{back.query}", secure=True)
    assert answer.status_code == 400
    assert "(access_denied)" in answer.content.decode()
    assert client.get("/admin/").status_code == 302


def _tampered(token: dict[str, str]) -> dict[str, str]:
    header, payload, signature = token["id_token"].split(".")
    raw = bytearray(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)))
    raw[0] ^= 0xFF
    flipped = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    return {**token, "id_token": f"{header}.{payload}.{flipped}"}


@pytest.mark.parametrize(
    ("case", "refusal"),
    [
        ("another issuer, signed with the provider's own key", "Invalid claim: 'iss'"),
        ("another provider, with its own key", "bad_signature"),
        ("a bad signature", "bad_signature"),
        ("another client's audience", "Invalid claim: 'aud'"),
        ("another sign-in's nonce", "Invalid claim: 'nonce'"),
    ],
)
def test_an_id_token_that_is_not_the_providers_for_hooksvc_is_refused(
    signin: oidc.Provider, case: str, refusal: str
) -> None:
    """The provider reached as 127.0.0.1 is another issuer with the same key (the mock's
    issuer is the URL it is reached at): only the `iss` check can refuse its token."""
    good = signin.token("sub-ann")
    assert hooksvc_oidc.claims_of(good, nonce="n-1")["sub"] == "sub-ann"
    token, nonce, client_id = good, "n-1", "hooksvc"
    if case.startswith("another issuer"):
        token = signin.token("sub-ann", host="127.0.0.1")
    elif case.startswith("another provider"):
        with oidc.provider(signin.ca_file.parent) as other:
            token = other.token("sub-ann")
    elif case == "a bad signature":
        token = _tampered(good)
    elif case.startswith("another client"):
        client_id = "someone-else"
    else:
        nonce = "n-2"
    with override_settings(OIDC_CLIENT_ID=client_id), pytest.raises(JoseError) as refused:
        hooksvc_oidc.claims_of(token, nonce=nonce)
    assert refusal in str(refused.value)


def test_an_unreachable_provider_gives_a_page_that_says_so(
    signin: oidc.Provider, client: Client
) -> None:
    with override_settings(OIDC_ISSUER="https://127.0.0.1:9"):
        answer = client.get("/admin/oidc/login/", secure=True)
    assert answer.status_code == 502
    assert "could not be reached" in answer.content.decode()


def test_the_sign_in_page_offers_single_sign_on_and_the_break_glass_form(
    signin: oidc.Provider, client: Client
) -> None:
    page = client.get("/admin/login/", {"next": "/admin/"}).content.decode()
    # Not the issuer's host ("Sign in with localhost"): the name people know it by.
    assert 'id="sso-sign-in"' in page and "Sign in with single sign-on" in page
    with override_settings(OIDC_DISPLAY_NAME="Example Corp SSO"):
        page = client.get("/admin/login/").content.decode()
    assert "Sign in with Example Corp SSO</a>" in page
    assert 'id="login-form"' in page
    with override_settings(LOCAL_LOGIN=False):
        page = client.get("/admin/login/").content.decode()
    assert 'id="sso-sign-in"' in page and 'id="login-form"' not in page


def test_with_local_login_off_a_local_account_neither_signs_in_nor_keeps_its_rights(
    signin: oidc.Provider, client: Client
) -> None:
    User.objects.create_superuser("root", "root@example.com", "a-long-password-1")
    client.force_login(User.objects.get(username="root"))
    assert client.get("/admin/").status_code == 200
    with override_settings(
        LOCAL_LOGIN=False, AUTHENTICATION_BACKENDS=["workflows.operators.oidc.Backend"]
    ):
        # The session it had no longer counts, and its password no longer signs in.
        assert client.get("/admin/").status_code == 302
        refused = Client().post(
            "/admin/login/", {"username": "root", "password": "a-long-password-1"}
        )
        assert refused.status_code == 200 and 'id="login-form"' not in refused.content.decode()
        assert "_auth_user_id" not in refused.client.session
        # Single sign-on still works.
        sign_in(Client(), signin, "sub-pat")


def test_a_person_whose_groups_give_no_role_is_told_so(
    signin: oidc.Provider, client: Client
) -> None:
    sign_in(client, signin, "sub-nobody")
    answer = client.get("/admin/", follow=True)
    assert 'id="no-role"' in answer.content.decode()
    assert "nobody@example.com" in answer.content.decode()


def test_turning_the_provider_off_ends_its_peoples_sessions(
    signin: oidc.Provider, client: Client
) -> None:
    sign_in(client, signin, "sub-pat")
    assert client.get("/admin/").status_code == 200
    with override_settings(OIDC_ISSUER="https://another-issuer.example"):
        assert client.get("/admin/").status_code == 302


def test_a_person_without_a_groups_claim_signs_in_with_their_userinfo_asked_and_no_role(
    signin: oidc.Provider, client: Client
) -> None:
    """Without the groups claim in the ID token, hooksvc asks the userinfo endpoint (as for a
    Keycloak mapper that adds groups there only); none there either: no group, no role."""
    signin.user("sub-gil", email="gil@example.com", email_verified=True)
    sign_in(client, signin, "sub-gil")
    assert Identity.objects.get(subject="sub-gil").groups == []
    assert client.get("/admin/").status_code == 302
