"""Who calls the REST API: a hooksvc API token, the identity provider's JWT, or a browser's
session (with Django's CSRF check on every write), each turned into the permission model's
Actor (workflows.operators.access) that every view asks.

A request's `user` is a `Caller` (a stable key for the throttle, and the Actor) and its
`auth` the Actor itself. A bearer token that does not authenticate is refused with a stable
code (`token_invalid`, `token_expired`, `token_revoked`, `provider_unreachable`) rather
than falling back to the session, so a robot learns that its credential is the problem.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from workflows.api import problems
from workflows.operators import access, bearer, identities, tokens

SCHEME = "Bearer"


@dataclasses.dataclass(frozen=True)
class Caller:
    """The authenticated caller as DRF's `request.user`: who, and the key it is counted by."""

    key: str
    actor: access.Actor
    #: token, provider or session.
    credential: str
    is_authenticated: bool = True
    is_active: bool = True
    is_anonymous: bool = False


class Refused(exceptions.AuthenticationFailed):
    """A credential that does not authenticate (the code says why)."""


def _bearer(request: Request) -> str | None:
    header = authentication.get_authorization_header(request).decode("latin-1")
    scheme, _, credential = header.partition(" ")
    if scheme.lower() != SCHEME.lower():
        return None
    credential = credential.strip()
    if not credential or " " in credential:
        raise Refused("write the header as `Authorization: Bearer <token>`", code="token_invalid")
    return credential


class BearerAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer hks_...` (an API token) or `Bearer <JWT>` (the provider's)."""

    def authenticate(self, request: Request) -> tuple[Caller, access.Actor] | None:
        credential = _bearer(request)
        if credential is None:
            return None
        try:
            if credential.startswith(tokens.PREFIX):
                token, actor = tokens.authenticate(credential)
                # The prefix too: a test database's ids start again, Redis's counts do not.
                key, kind = f"token:{token.pk}:{token.prefix}", "token"
            elif bearer.looks_like_jwt(credential):
                key, actor = bearer.authenticate(credential)
                kind = "provider"
            else:
                raise tokens.Refused(
                    "token_invalid", "the token is neither a hooksvc API token nor a JWT"
                )
        except tokens.Refused as exc:
            if exc.code == "provider_unreachable":
                raise problems.Unavailable(str(exc)) from None
            raise Refused(str(exc), code=exc.code) from None
        return Caller(key=key, actor=actor, credential=kind), actor

    def authenticate_header(self, request: Request) -> str:
        return f'{SCHEME} realm="hooksvc"'


class SessionAuthentication(authentication.SessionAuthentication):
    """A browser signed in to the admin (a local account, or through the provider); DRF's
    own class, which enforces CSRF on unsafe methods; the Actor is named `api:<user>`."""

    def authenticate(self, request: Request) -> tuple[Caller, access.Actor] | None:
        found = super().authenticate(request)
        if found is None:
            return None
        user: Any = found[0]
        actor = identities.actor_of_request(request._request, channel="api")
        return Caller(key=f"user:{user.pk}", actor=actor, credential="session"), actor


class SignedIn(permissions.BasePermission):
    """An authenticated caller who may view somewhere; what they may see and do there is
    each view's question."""

    message = "your roles grant nothing in hooksvc: ask for a role (docs/sign-in.md)"

    def has_permission(self, request: Request, view: Any) -> bool:
        found = request.auth
        if not isinstance(found, access.Actor):
            # DRF answers 401 (not authenticated) when no credential was given.
            return False
        return found.may(access.Permission.VIEW)


class Authenticated(permissions.BasePermission):
    """Any authenticated caller, whatever their roles (`/me` tells them what they are)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, access.Actor)


def actor(request: Request) -> access.Actor:
    """The caller's Actor (SignedIn has made sure there is one)."""
    found = request.auth
    if not isinstance(found, access.Actor):
        raise exceptions.NotAuthenticated()
    return found
