"""The identity provider's own tokens on the REST API: a JWT the provider signed, checked
against its published keys (JWKS), as a person's or a robot's credential.

What is accepted: a compact JWS (a JWT access token, RFC 9068, as Keycloak, Entra ID and Okta
issue them, or an ID token, as the Kubernetes API server accepts them) signed with an
asymmetric algorithm by a key of HOOKSVC_OIDC_ISSUER's JWKS (fetched once, and again when the
cached keys verify no signature, with or without a `kid`: at most every
oidc.KEYS_REFRESH_SECONDS), whose `iss` is
exactly that issuer, whose `aud` names one of HOOKSVC_OIDC_API_AUDIENCE (default: the
client ID), with `sub` and an `exp` not past (by the engine's clock, a minute of leeway
for clock skew). Opaque access tokens (which only the provider can read) are not. The
caller's roles come from the token's groups claim through the role rules, exactly as a
sign-in's do (workflows.operators.identities); a person whose user was deactivated in the
admin is refused. The e-mail claim is the caller's only when the provider says it verified it
(`email_verified`, identities.verified_email). The provider's client and its key cache are
workflows.operators.oidc's.
"""

from __future__ import annotations

import hashlib
from typing import Any

import requests
from authlib.integrations.base_client import OAuthError
from django.conf import settings
from joserfc import jwt
from joserfc.errors import BadSignatureError, ExpiredTokenError, InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from workflows import clock
from workflows.models import Identity
from workflows.operators import access, identities, oidc, roles
from workflows.operators.tokens import Refused

#: Signature algorithms a provider's key may use: asymmetric only (a JWKS publishes
#: public keys; `none` and HMAC would let anyone who knows the key material sign).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
#: Clock skew allowed between the provider and hooksvc on `exp`.
LEEWAY_SECONDS = 60


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts: a compact JWS (a JWE has five)."""
    return token.count(".") == 2


def _keys(*, refresh: bool = False) -> KeySet | None:
    """The provider's keys as cached; with `refresh`, fetched again first (None when that
    was done too recently: oidc.refresh_keys)."""
    try:
        if refresh and not oidc.refresh_keys():
            return None
        return KeySet.import_key_set(oidc.client().fetch_jwk_set())
    except (requests.RequestException, OAuthError, RuntimeError, ValueError, JoseError) as exc:
        raise Refused(
            "provider_unreachable",
            f"the identity provider's keys could not be read ({type(exc).__name__})",
        ) from None


def _decode(token: str) -> Any:
    """`token` verified by the cached keys, or by the keys fetched again when those verify
    no signature (a rotated key, named by a new `kid` or by none)."""
    try:
        return jwt.decode(token, _keys() or KeySet([]), algorithms=ALGORITHMS)
    except (BadSignatureError, InvalidKeyIdError):
        fresh = _keys(refresh=True)
        if fresh is None:
            raise
        return jwt.decode(token, fresh, algorithms=ALGORITHMS)


def claims_of(token: str) -> dict[str, Any]:
    """The claims of `token` once it is proven the configured provider's, for hooksvc."""
    if not settings.OIDC_ISSUER:
        raise Refused("token_invalid", "hooksvc accepts no identity provider's tokens here")
    try:
        decoded = _decode(token)
    except (JoseError, ValueError):
        raise Refused(
            "token_invalid", "the token is not signed by the identity provider's keys"
        ) from None
    checks = jwt.JWTClaimsRegistry(
        now=lambda: int(clock.now().timestamp()),
        leeway=LEEWAY_SECONDS,
        iss={"essential": True, "value": settings.OIDC_ISSUER},
        aud={
            "essential": True,
            "values": list(settings.OIDC_API_AUDIENCES or [settings.OIDC_CLIENT_ID]),
        },
        sub={"essential": True},
        exp={"essential": True},
    )
    try:
        checks.validate(decoded.claims)
    except ExpiredTokenError:
        raise Refused("token_expired", "the identity provider's token has expired") from None
    except JoseError as exc:
        claim = getattr(exc, "claim", "") or ""
        raise Refused(
            "token_invalid", f"the identity provider's token is not for hooksvc ({claim})"
        ) from None
    return dict(decoded.claims)


def authenticate(token: str) -> tuple[str, access.Actor]:
    """A stable key of the caller (for throttling), and their Actor, from a provider's token."""
    claims = claims_of(token)
    subject = str(claims["sub"])
    identity = (
        Identity.objects.filter(issuer=settings.OIDC_ISSUER, subject=subject)
        .select_related("user")
        .first()
    )
    if identity is not None and not identity.user.is_active:
        raise Refused("token_invalid", "the person's account is deactivated")
    email = identities.verified_email(claims) or (identity.email if identity else "")
    groups = identities.groups_of(claims, settings.OIDC_GROUPS_CLAIM)
    actor = access.Actor(
        name=f"api:{email or subject}",
        subject=subject,
        email=email,
        grants=roles.grants_of(groups),
    )
    key = hashlib.sha256(f"{settings.OIDC_ISSUER}\n{subject}".encode()).hexdigest()[:16]
    return f"oidc:{key}", actor
