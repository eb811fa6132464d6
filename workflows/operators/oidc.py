"""Single sign-on for the admin through an OpenID Connect provider (Dex, Keycloak, Entra ID...).

Authlib is the client: it reads the provider's discovery document
(`<issuer>/.well-known/openid-configuration`), sends the browser there with a state, a nonce
and a PKCE challenge, and on the way back exchanges the code and validates the ID token: its
signature against the provider's published keys, its issuer (`iss`, exactly
HOOKSVC_OIDC_ISSUER), audience (the client ID), expiry and nonce.

The keys (JWKS) are cached for the process. authlib fetches them again only when a token
names a key ID (`kid`) the cache lacks (authlib 1.9
integrations/base_client/sync_openid.py, OpenIDMixin.parse_id_token: `except
InvalidKeyIdError` -> fetch_jwk_set(force=True)); a token without `kid` is checked against
the one cached key (joserfc _keys.py KeySet.get_by_kid: no kid and one key -> that key), so
after a provider rotated a key without naming it, every sign-in failed with a bad signature
until something else refreshed the cache. Here any signature that the cached keys do not
verify makes the keys be fetched again, at most every KEYS_REFRESH_SECONDS per process (so
forged tokens cannot make hooksvc hammer the provider), for sign-in and the API's bearer
tokens alike (`refresh_keys`).
Chosen over mozilla-django-oidc, which checks neither `iss` nor `aud` and matches users by
e-mail, and over django-allauth, whose account, sign-up and e-mail flows hooksvc has no use
for. The person is then the Django user of their issuer and subject
(workflows.operators.identities), and what they may do follows from their groups claim.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any

import requests
from authlib.integrations.base_client import OAuthError
from authlib.integrations.django_client import DjangoOAuth2App, OAuth
from authlib.integrations.requests_client import OAuth2Session
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.backends import BaseBackend
from django.contrib.auth.models import User
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from joserfc.errors import BadSignatureError, InvalidKeyIdError, JoseError

from workflows.operators import identities

logger = logging.getLogger(__name__)

#: The provider's calls (discovery, keys, token) give up after this long: a person waits.
TIMEOUT_SECONDS = 10
#: How long a sign-in lasts; then the person signs in again (and their groups are read again).
SESSION_SECONDS = 8 * 3600
_NEXT = "hooksvc_oidc_next"


class Backend(BaseBackend):
    """Loads a signed-in person's user for each request; sign-in itself is `callback`."""

    def get_user(self, user_id: int) -> User | None:
        # Only users of the configured issuer: turning the provider off (or changing it)
        # ends their sessions.
        return (
            User.objects.filter(pk=user_id, is_active=True, identity__issuer=settings.OIDC_ISSUER)
            .select_related("identity")
            .first()
        )


class _Session(OAuth2Session):  # type: ignore[misc]
    """authlib's requests session, with its `verify` in every request: requests lets
    REQUESTS_CA_BUNDLE in the environment override a session's own (sessions.py,
    `merge_environment_settings`), and HOOKSVC_OIDC_CA_FILE must win."""

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("verify", self.verify)
        return super().request(method, url, *args, **kwargs)


#: The cached keys are fetched again, when a signature fails, at most this often.
KEYS_REFRESH_SECONDS = 10.0
_refreshed = [0.0]
_refresh_lock = threading.Lock()


def refresh_keys() -> bool:
    """Fetch the provider's keys again unless that was done less than KEYS_REFRESH_SECONDS
    ago; whether it was (the caller then verifies once more)."""
    with _refresh_lock:
        if _refreshed[0] and time.monotonic() - _refreshed[0] < KEYS_REFRESH_SECONDS:
            return False
        _refreshed[0] = time.monotonic()
    client().fetch_jwk_set(force=True)
    return True


class _App(DjangoOAuth2App):  # type: ignore[misc]
    client_cls = _Session

    def parse_id_token(self, token: Any, nonce: Any, *args: Any, **kwargs: Any) -> Any:
        """authlib's, with the keys fetched again when they verify no signature (a rotated
        key without `kid`: see the module's docstring)."""
        try:
            return super().parse_id_token(token, nonce, *args, **kwargs)
        except (BadSignatureError, InvalidKeyIdError):
            if not refresh_keys():
                raise
        return super().parse_id_token(token, nonce, *args, **kwargs)


class _Registry(OAuth):  # type: ignore[misc]
    oauth2_client_cls = _App


@functools.cache
def client() -> DjangoOAuth2App:
    """The OpenID Connect client of the configured provider (metadata and keys cached)."""
    kwargs: dict[str, Any] = {
        "scope": " ".join(settings.OIDC_SCOPES),
        "code_challenge_method": "S256",
        # authlib's session bounds its requests by `default_timeout` alone: a `timeout`
        # here lands in its OAuth metadata, unread (authlib 1.x,
        # integrations/requests_client/oauth2_session.py, OAuth2Session.request).
        "default_timeout": TIMEOUT_SECONDS,
    }
    if settings.OIDC_CA_FILE:
        kwargs["verify"] = settings.OIDC_CA_FILE
    if not settings.OIDC_CLIENT_SECRET:
        # A public client: PKCE alone, no client secret at the token endpoint.
        kwargs["token_endpoint_auth_method"] = "none"  # noqa: S105  # nosec B105
    registry = _Registry()
    registry.register(
        "hooksvc",
        client_id=settings.OIDC_CLIENT_ID,
        client_secret=settings.OIDC_CLIENT_SECRET or None,
        server_metadata_url=settings.OIDC_ISSUER.rstrip("/") + "/.well-known/openid-configuration",
        client_kwargs=kwargs,
    )
    app: DjangoOAuth2App = registry.create_client("hooksvc")
    return app


@receiver(setting_changed)
def _forget(setting: str, **kwargs: Any) -> None:
    if setting.startswith("OIDC_"):
        client.cache_clear()
        _refreshed[0] = 0.0


def _claims_options() -> dict[str, Any]:
    # The issuer configured, not only the one the discovery document names; and the audience
    # pinned too: authlib checks `aud` only when told (authlib/jose/rfc7519/claims.py,
    # JWTClaims.validate_aud), and its `azp` check alone lets a token for several audiences by.
    return {
        "iss": {"essential": True, "values": [settings.OIDC_ISSUER]},
        "aud": {"essential": True, "values": [settings.OIDC_CLIENT_ID]},
    }


def claims_of(token: dict[str, Any], *, nonce: str) -> dict[str, Any]:
    """The validated claims of a token response's ID token; JoseError when it is not valid.

    The same check the callback makes: signature, issuer, audience, expiry, nonce.
    """
    claims = client().parse_id_token(token, nonce=nonce, claims_options=_claims_options())
    if claims is None:
        raise OAuthError(error="no_id_token", description="the token response has no ID token")
    return dict(claims)


def login(request: HttpRequest) -> HttpResponse:
    """Sends the browser to the provider; it comes back to `callback`."""
    if not settings.OIDC_ISSUER:
        return HttpResponseRedirect(reverse("admin:login"))
    wanted = request.GET.get("next", "")
    safe = url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    request.session[_NEXT] = wanted if wanted and safe else reverse("admin:index")
    try:
        response: HttpResponse = client().authorize_redirect(
            request, request.build_absolute_uri(reverse("oidc_callback"))
        )
    except requests.RequestException as exc:
        logger.warning("identity provider unreachable", extra={"error": type(exc).__name__})
        return _failed(request, "The identity provider could not be reached.", 502)
    return response


def callback(request: HttpRequest) -> HttpResponse:
    """The provider's answer: verify it, sign the person in as their user, go on."""
    if not settings.OIDC_ISSUER:
        return HttpResponseRedirect(reverse("admin:login"))
    try:
        token = client().authorize_access_token(request, claims_options=_claims_options())
        claims = token.get("userinfo") or {}
        groups = identities.groups_of(claims, settings.OIDC_GROUPS_CLAIM)
        if (
            claims
            and settings.OIDC_GROUPS_CLAIM not in claims
            and "userinfo_endpoint" in client().server_metadata
        ):
            # Some providers (Keycloak without the mapper's ID token option) send groups
            # only from their userinfo endpoint.
            userinfo = client().userinfo(token=token)
            groups = identities.groups_of(userinfo, settings.OIDC_GROUPS_CLAIM)
    except OAuthError as exc:
        logger.warning("sign-in refused", extra={"error": exc.error})
        return _failed(request, f"The sign-in did not complete ({exc.error}). Sign in again.", 400)
    except JoseError as exc:
        logger.warning("ID token refused", extra={"error": exc.error})
        return _failed(request, "The identity provider's ID token could not be verified.", 403)
    except requests.RequestException as exc:
        logger.warning("identity provider unreachable", extra={"error": type(exc).__name__})
        return _failed(request, "The identity provider could not be reached.", 502)
    if not claims:
        return _failed(request, "The identity provider sent no ID token.", 403)
    user = identities.signed_in(
        issuer=settings.OIDC_ISSUER,
        subject=str(claims["sub"]),
        email=identities.verified_email(claims),
        groups=groups,
        now=timezone.now(),
    )
    following = request.session.pop(_NEXT, reverse("admin:index"))
    auth.login(request, user, backend=f"{Backend.__module__}.{Backend.__qualname__}")
    request.session.set_expiry(SESSION_SECONDS)
    logger.info(
        "signed in",
        extra={"action": "sign_in", "subject": user.identity.subject, "groups": groups},
    )
    return HttpResponseRedirect(following)


def _failed(request: HttpRequest, problem: str, status: int) -> HttpResponse:
    context = {"title": "Sign-in failed", "problem": problem, "site_header": "hooksvc"}
    return TemplateResponse(request, "admin/workflows/signin_failed.html", context, status=status)
