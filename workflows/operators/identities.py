"""Who a user is and what they may do: the Actor of a Django user, a request, or a sign-in.

A user who signed in through the identity provider has an `Identity` (issuer, subject,
e-mail, groups); their grants are their groups' through the role rules
(workflows.operators.roles), and only while that issuer is the one configured. A local
account (break glass) maps onto the same permissions: a superuser may do everything; staff
may view; `workflows.operate_run` adds operating and releasing; the template permissions
add editing; all in every namespace; and none of it while HOOKSVC_LOCAL_LOGIN is off.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import transaction
from django.http import HttpRequest

from workflows.models import Identity
from workflows.operators import roles
from workflows.operators.access import EVERYTHING, Actor, Permission, Scope

#: Django users are named after the provider's e-mail claim when there is one (what people
#: read in the run history), else its subject.
_USERNAME_LENGTH = User._meta.get_field("username").max_length or 150
_NOTHING: dict[Permission, Scope] = {}
#: The backend of local accounts' passwords.
_PASSWORDS = "django.contrib.auth.backends.ModelBackend"


def _identity(user: AbstractBaseUser | AnonymousUser) -> Identity | None:
    try:
        found: Identity = user.identity  # type: ignore[union-attr]
    except (AttributeError, Identity.DoesNotExist):
        return None
    return found


def _local_grants(user: User) -> Mapping[Permission, Scope]:
    if not settings.LOCAL_LOGIN:
        return _NOTHING
    if user.is_superuser:
        return EVERYTHING
    if not user.is_staff:
        return _NOTHING
    granted: set[Permission] = {Permission.VIEW}
    if user.has_perm("workflows.operate_run"):
        granted |= {Permission.OPERATE, Permission.RELEASE}
    if user.has_perm("workflows.change_workflowtemplate") or user.has_perm(
        "workflows.change_addonprofile"
    ):
        granted.add(Permission.EDIT)
    return {permission: None for permission in granted}


def actor_of_user(
    user: AbstractBaseUser | AnonymousUser, *, channel: str = "admin", local: bool = False
) -> Actor:
    """The user as an Actor, named `<channel>:<username>` in what they do. `local`: the
    user is known to be a local account (no Identity to look for)."""
    if not user.is_authenticated or not user.is_active or not isinstance(user, User):
        return Actor(name="anonymous")
    name = f"{channel}:{user.get_username()}"
    identity = None if local else _identity(user)
    if identity is None:
        return Actor(name=name, grants=_local_grants(user))
    grants = (
        roles.grants_of(identity.groups)
        if settings.OIDC_ISSUER and identity.issuer == settings.OIDC_ISSUER
        else _NOTHING
    )
    return Actor(name=name, subject=identity.subject, email=identity.email, grants=grants)


def actor_of_request(request: HttpRequest, *, channel: str = "admin") -> Actor:
    """The signed-in user's Actor, worked out once per request (named `<channel>:<user>`:
    the admin's pages, or the REST API with a browser's session)."""
    found: Actor | None = getattr(request, "_hooksvc_actor", None)
    if found is None or not found.name.startswith(f"{channel}:"):
        # Signed in with a password: a local account (the provider's users have none), so
        # no query for an Identity; the provider's backend loads it with the user.
        local = request.session.get(auth.BACKEND_SESSION_KEY) == _PASSWORDS
        found = actor_of_user(request.user, channel=channel, local=local)
        request._hooksvc_actor = found  # type: ignore[attr-defined]
    return found


def actor_named(username: str, *, channel: str = "cli") -> Actor:
    """The Actor of the user called `username` (the CLI's `--as`); LookupError if none."""
    user = User.objects.filter(username=username).select_related("identity").first()
    if user is None:
        raise LookupError(
            f"no user {username!r}: people who signed in through the identity provider are "
            "named by their e-mail; local accounts by their username"
        )
    identity = _identity(user)
    if identity is not None and identity.issuer != settings.OIDC_ISSUER:
        # Their grants would be none here, and every answer an empty one said with confidence.
        known = (
            f"only {settings.OIDC_ISSUER}"
            if settings.OIDC_ISSUER
            else "no provider (HOOKSVC_OIDC_ISSUER is unset)"
        )
        raise LookupError(
            f"{username!r} signs in through {identity.issuer}, and this process knows {known}:"
            " run it beside the `make run` that serves with that provider (it reads its"
            " settings from var/make-run.json), or export the HOOKSVC_OIDC_* and"
            " HOOKSVC_ROLES_FILE settings the server has"
        )
    return actor_of_user(user, channel=channel)


def no_role(actor: Actor, username: str) -> str:
    """Why the user `username` (as `actor`) may see nothing; "" when they may see something."""
    if actor.grants:
        return ""
    if actor.subject:
        if not settings.ROLES_FILE:
            return f"{username} gets no role: HOOKSVC_ROLES_FILE is unset, so no group gives one"
        return (
            f"{username} gets no role: no rule of HOOKSVC_ROLES_FILE {settings.ROLES_FILE}"
            " names a group of their last sign-in"
        )
    if not settings.LOCAL_LOGIN:
        return f"{username} gets no role: local accounts count for nothing (HOOKSVC_LOCAL_LOGIN=0)"
    return f"{username} gets no role: a local account needs staff status to view"


def _username(issuer: str, subject: str, email: str) -> str:
    """A readable, unique username: the e-mail (else the subject), made unique if taken."""
    wanted = (email or subject)[:_USERNAME_LENGTH]
    holder = User.objects.filter(username=wanted).select_related("identity").first()
    mine = holder is not None and (
        (identity := _identity(holder)) is not None
        and (identity.issuer, identity.subject) == (issuer, subject)
    )
    if holder is None or mine:
        return wanted
    # Taken by someone else (a local account, or another subject with that e-mail): never
    # take their account over; a suffix from issuer and subject keeps this one apart.
    tag = hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()[:10]
    return f"{wanted[: _USERNAME_LENGTH - 11]}~{tag}"


def verified_email(claims: Mapping[str, Any]) -> str:
    """The e-mail claim, when the provider says it verified the address (`email_verified`,
    OpenID Connect Core 1.0 section 5.1: "true if the End-User's e-mail address has been
    verified; otherwise false"), else "". A provider that lets people type any address
    would otherwise let them be recorded (and named) as someone else.
    HOOKSVC_OIDC_TRUST_UNVERIFIED_EMAIL takes the claim as it is, for providers that give
    only addresses they manage and send no `email_verified` (Entra ID)."""
    email = claims.get("email")
    if not isinstance(email, str) or not email:
        return ""
    verified = claims.get("email_verified")
    # Some providers (AWS Cognito) send the boolean as a string.
    if verified is True or verified == "true" or settings.OIDC_TRUST_UNVERIFIED_EMAIL:
        return email
    return ""


def groups_of(claims: Mapping[str, Any], claim: str) -> list[str]:
    """The groups a claim carries: a list of names, or one name; anything else gives none."""
    value = claims.get(claim)
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return sorted(set(value))
    return []


def signed_in(
    *, issuer: str, subject: str, email: str, groups: list[str], now: datetime.datetime
) -> User:
    """The Django user of the identity `issuer`/`subject`, made or brought up to date.

    Keyed by issuer and subject only (an e-mail can change hands); the e-mail and groups are
    what the provider gave at this sign-in. The user has no password and is not staff:
    what they may do comes from the role rules (`actor_of_user`).
    """
    with transaction.atomic():
        identity = (
            Identity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if identity is None:
            user = User(username=_username(issuer, subject, email), email=email)
            user.set_unusable_password()
            user.save()
            identity = Identity(user=user, issuer=issuer, subject=subject)
        else:
            user = identity.user
            username = _username(issuer, subject, email)
            if (user.username, user.email) != (username, email):
                user.username, user.email = username, email
                user.save(update_fields=["username", "email"])
        identity.email, identity.groups, identity.signed_in_at = email, groups, now
        identity.save()
    return user
