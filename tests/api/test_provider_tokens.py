"""The identity provider's own JWTs on the REST API, from a real OpenID provider
(oidc-provider-mock over TLS, tests/support/oidc.py).

A JWT bearer must be signed by a key of the configured issuer's JWKS, name that issuer in
`iss` and one of HOOKSVC_OIDC_API_AUDIENCE (default the client ID) in `aud`, and not be
expired: RFC 9068 section 4 (access tokens as JWTs: validate `iss`, `aud`, the signature
with the issuer's keys, `exp`), and what the Kubernetes API server asks of a bearer ID token
(kubernetes/kubernetes staging/src/k8s.io/apiserver/plugin/pkg/authenticator/token/oidc/
oidc.go, `jwtAuthenticator.AuthenticateToken`: the issuer, then the signature by the
provider's keys and the expiry; `idTokenVerifier.verifyAudience`: any one of the configured
audiences). The tokens
here are the ID tokens the provider issued (oidc-provider-mock's access tokens are opaque,
which hooksvc refuses: only the provider can read one). The caller's roles come from the
token's groups claim and the role rules, as a sign-in's do.
"""

from __future__ import annotations

import base64
import datetime

import pytest
from django.contrib.auth.models import User
from django.test.utils import override_settings

from tests.api.conftest import Api, problem, waiting_run
from tests.identity.conftest import sign_in
from tests.support import oidc
from workflows import clock
from workflows.models import RunEvent

pytestmark = pytest.mark.django_db


def id_token(provider: oidc.Provider, sub: str, host: str = "localhost") -> str:
    token: str = provider.token(sub, host=host)["id_token"]
    return token


def test_a_persons_token_acts_under_their_groups_roles_and_is_recorded(
    signin: oidc.Provider, api: Api
) -> None:
    runs = {ns: waiting_run(ns) for ns in ("team-a", "team-b")}
    client = api(id_token(signin, "sub-ann"))
    me = client.get("/api/v1/me/").json()
    assert (me["name"], me["subject"], me["email"], me["credential"]) == (
        "api:ann@example.com",
        "sub-ann",
        "ann@example.com",
        "provider",
    )
    seen = {r["cluster"]["namespace"] for r in client.get("/api/v1/runs/").json()["results"]}
    assert seen == {"team-a"}
    body = {"step": "approve", "reason": "CAB-7"}
    done = client.post(f"/api/v1/runs/{runs['team-a'].pk}/approve/", body, format="json")
    assert done.status_code == 200 and done.json()["changed"] is True
    hidden = client.post(f"/api/v1/runs/{runs['team-b'].pk}/approve/", body, format="json")
    assert problem(hidden)["code"] == "not_found"
    event = RunEvent.objects.get(kind="action")
    assert (event.run_id, event.actor, event.actor_subject, event.actor_email) == (
        runs["team-a"].pk,
        "api:ann@example.com",
        "sub-ann",
        "ann@example.com",
    )


def _refused(api: Api, token: str, code: str = "token_invalid") -> None:
    response = api(token).get("/api/v1/runs/")
    assert response.status_code == 401, response.content
    assert problem(response)["code"] == code


def test_a_token_of_another_issuer_is_refused(signin: oidc.Provider, api: Api) -> None:
    # The same provider reached at another address: signed with the right key, another `iss`.
    _refused(api, id_token(signin, "sub-ann", host="127.0.0.1"))


def test_a_token_with_a_bad_signature_is_refused(signin: oidc.Provider, api: Api) -> None:
    header, payload, signature = id_token(signin, "sub-pat").split(".")
    raw = bytearray(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)))
    raw[0] ^= 1
    flipped = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    _refused(api, f"{header}.{payload}.{flipped}")
    # And a payload changed under the provider's signature (more groups, say).
    claims = base64.urlsafe_b64encode(b'{"sub":"sub-pat","groups":["platform"]}').decode()
    _refused(api, f"{header}.{claims.rstrip('=')}.{signature}")


def test_a_token_of_another_provider_is_refused(
    signin: oidc.Provider, api: Api, tls_files: object
) -> None:
    from tests.support import servers

    assert isinstance(tls_files, servers.TLSFiles)
    with oidc.provider(tls_files.server_dir) as other:
        other.user("sub-pat", email="pat@example.com", email_verified=True, groups=["platform"])
        forged = id_token(other, "sub-pat")
    _refused(api, forged)


def test_a_token_for_another_audience_is_refused(signin: oidc.Provider, api: Api) -> None:
    token = id_token(signin, "sub-pat")
    with override_settings(OIDC_API_AUDIENCES=["hooksvc-api"]):
        _refused(api, token)
    with override_settings(OIDC_API_AUDIENCES=["hooksvc-api", "hooksvc"]):
        assert api(token).get("/api/v1/runs/").status_code == 200


def test_an_expired_token_is_refused(
    signin: oidc.Provider, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = id_token(signin, "sub-pat")
    assert api(token).get("/api/v1/runs/").status_code == 200
    # The provider's tokens live an hour; hooksvc allows a minute of clock skew.
    later = clock.now() + datetime.timedelta(hours=1, minutes=2)
    monkeypatch.setattr(clock, "now", lambda: later)
    _refused(api, token, "token_expired")


def test_an_opaque_access_token_is_refused(signin: oidc.Provider, api: Api) -> None:
    _refused(api, signin.token("sub-pat")["access_token"])


def test_without_a_provider_configured_no_jwt_is_taken(signin: oidc.Provider, api: Api) -> None:
    token = id_token(signin, "sub-pat")
    with override_settings(OIDC_ISSUER=""):
        _refused(api, token)


def test_a_person_deactivated_in_the_admin_is_refused(signin: oidc.Provider, api: Api) -> None:
    from django.test import Client

    sign_in(Client(), signin, "sub-vic")
    token = id_token(signin, "sub-vic")
    assert api(token).get("/api/v1/runs/").status_code == 200
    User.objects.filter(identity__subject="sub-vic").update(is_active=False)
    _refused(api, token)


def test_a_person_whose_groups_match_no_rule_may_do_nothing(
    signin: oidc.Provider, api: Api
) -> None:
    client = api(id_token(signin, "sub-nobody"))
    assert client.get("/api/v1/me/").json()["grants"]["view"] == []
    refused = client.get("/api/v1/runs/")
    assert refused.status_code == 403
    assert problem(refused)["code"] == "permission_denied"
