"""API tokens: the credentials robots use on the REST API, made, listed and revoked by an admin.

A token is `hks_` and 43 random URL-safe characters (256 bits). Only its SHA-256 is kept
(a hash this fast is enough for a secret this long: nobody can guess one to match), so the
token is shown once, when it is made. It is scoped like a role rule
(workflows.operators.roles: roles, in every namespace or in some; editor and admin only in
every namespace) and always expires, at most MAX_LIFETIME after it is made. Making and
revoking need every permission in every namespace (the `admin` role, or a local
superuser). The API (workflows.api.auth) calls `authenticate` with what a request carries:
the token's Actor, named `token:<name>` in the run history, or `Refused` with a stable code.
A token made by a person works only while that person's user is active (deactivating someone
ends what they made, as it ends their sessions).
The CLI (`manage.py workflows token`) and the admin's API tokens page call the rest.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import logging
import re
import secrets
from collections.abc import Sequence
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Q

from workflows import clock
from workflows.models import ApiToken
from workflows.operators import access, roles

logger = logging.getLogger(__name__)

PREFIX = "hks_"
#: The longest a token lives; make a new one before it ends (rotation).
MAX_LIFETIME = datetime.timedelta(days=366)
#: A token's last use is written at most this often (not one write per request).
USE_RECORD_SECONDS = 60
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,98}[a-z0-9])?")
#: Longer than any token hooksvc makes: refused before any look-up.
_LONGEST = 100


_LIFETIME = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?")


def parse_lifetime(text: str) -> datetime.timedelta:
    """`90d`, `12h`, `1d12h`: how long a token lives (more than nothing, at most 366d)."""
    match = _LIFETIME.fullmatch(text.strip())
    if not text.strip() or match is None:
        raise TokenError(f"lifetime {text!r}: write it in days and hours (90d, 12h, 1d12h)")
    days, hours = (int(n or 0) for n in match.groups())
    lifetime = datetime.timedelta(days=days, hours=hours)
    if not datetime.timedelta(0) < lifetime <= MAX_LIFETIME:
        raise TokenError(f"lifetime {text!r}: more than 0 and at most 366d")
    return lifetime


def summary(token: ApiToken) -> dict[str, Any]:
    """A token as `workflows token list -o json` shows it (never the token itself)."""

    def at(moment: datetime.datetime | None) -> str | None:
        return moment.isoformat() if moment else None

    return {
        "name": token.name,
        "prefix": token.prefix,
        "roles": token.roles,
        "namespaces": token.namespaces,
        "createdAt": at(token.created_at),
        "createdBy": token.created_by,
        "expiresAt": at(token.expires_at),
        "revokedAt": at(token.revoked_at),
        "revokedBy": token.revoked_by,
        "lastUsedAt": at(token.last_used_at),
    }


class TokenError(ValueError):
    """A token that cannot be made or revoked as asked; the message says why."""


class Refused(Exception):
    """A presented token that does not authenticate; `code` is stable, the message says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class Made:
    """A token just made: its record, and the token itself (shown this once, kept nowhere)."""

    token: ApiToken
    secret: str


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def require_admin(actor: access.Actor, what: str) -> None:
    """Refuse (`access.Denied`) unless `actor` has every permission in every namespace."""
    if not all(actor.may_everywhere(p) for p in access.Permission):
        raise access.Denied(
            f"{actor.name} may not {what}: only an admin (every role in every namespace) may"
        )


def rule_of(token: ApiToken) -> roles.Rule:
    return roles.Rule(
        group=f"token:{token.name}",
        roles=tuple(token.roles),
        namespaces=None if token.namespaces is None else frozenset(token.namespaces),
    )


def actor_of(token: ApiToken) -> access.Actor:
    """What a request with this token may do, and the name it is recorded by."""
    return access.Actor(name=f"token:{token.name}", grants=rule_of(token).grants())


def token_create(
    *,
    name: str,
    role_names: Sequence[str],
    namespaces: Sequence[str] | None,
    lifetime: datetime.timedelta,
    actor: str | access.Actor,
) -> Made:
    """Make a token named `name` with `role_names` (in `namespaces`, or every namespace)."""
    who = access.actor_of(actor)
    require_admin(who, "make API tokens")
    if not _NAME.fullmatch(name):
        raise TokenError(
            f"name {name!r}: lower-case letters, digits, '-' and '.', at most 100 characters"
        )
    try:
        rule = roles.rule(
            {"group": name, "roles": list(role_names), "namespaces": _listed(namespaces)},
            f"token {name}",
        )
    except roles.RulesError as exc:
        raise TokenError(str(exc)) from None
    if not datetime.timedelta(0) < lifetime <= MAX_LIFETIME:
        raise TokenError("a token lives more than 0 s and at most 366 days")
    secret = PREFIX + secrets.token_urlsafe(32)
    now = clock.now().replace(microsecond=0)
    try:
        with transaction.atomic():
            token = ApiToken.objects.create(
                name=name,
                prefix=secret[:9],
                digest=digest(secret),
                roles=list(rule.roles),
                namespaces=None if rule.namespaces is None else sorted(rule.namespaces),
                created_at=now,
                expires_at=now + lifetime,
                created_by=who.name,
                created_by_subject=who.subject,
                created_by_email=who.email,
            )
            _log("token_create", token, who)
    except IntegrityError:
        raise TokenError(
            f"a token named {name!r} exists already; revoke it or pick another name"
        ) from None
    return Made(token=token, secret=secret)


def _listed(namespaces: Sequence[str] | None) -> list[str] | None:
    return None if namespaces is None else list(namespaces)


def token_revoke(*, name: str, actor: str | access.Actor) -> ApiToken:
    """Revoke the token `name` at once: requests carrying it are refused from now on."""
    who = access.actor_of(actor)
    require_admin(who, "revoke API tokens")
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().filter(name=name).first()
        if token is None:
            raise TokenError(f"no token named {name!r}")
        if token.revoked_at is not None:
            raise TokenError(f"token {name!r} was revoked already by {token.revoked_by}")
        token.revoked_at, token.revoked_by = clock.now(), who.name
        token.save(update_fields=["revoked_at", "revoked_by"])
        _log("token_revoke", token, who)
    return token


def tokens_list(*, actor: str | access.Actor) -> list[ApiToken]:
    """Every token, revoked and expired ones too (an admin's view), by name."""
    require_admin(access.actor_of(actor), "list API tokens")
    return list(ApiToken.objects.order_by("name"))


def authenticate(secret: str) -> tuple[ApiToken, access.Actor]:
    """The token `secret` is, and its Actor; `Refused` for one unknown, revoked or expired."""
    if not secret.startswith(PREFIX) or len(secret) > _LONGEST:
        raise Refused("token_invalid", "the token is not one hooksvc made")
    token = ApiToken.objects.filter(digest=digest(secret)).first()
    if token is None:
        raise Refused("token_invalid", "the token is not one hooksvc made (or it was deleted)")
    now = clock.now()
    if token.revoked_at is not None:
        raise Refused("token_revoked", f"token {token.name} was revoked")
    if token.expires_at <= now:
        raise Refused("token_expired", f"token {token.name} expired; ask an admin for a new one")
    if _maker_deactivated(token):
        raise Refused(
            "token_revoked",
            f"token {token.name} was made by {token.created_by}, whose account is deactivated;"
            " ask an admin for a new one",
        )
    quiet = now - datetime.timedelta(seconds=USE_RECORD_SECONDS)
    ApiToken.objects.filter(
        Q(pk=token.pk) & (Q(last_used_at__isnull=True) | Q(last_used_at__lt=quiet))
    ).update(last_used_at=now)
    return token, actor_of(token)


def _maker_deactivated(token: ApiToken) -> bool:
    """Whether the person who made `token` is deactivated (or deleted): what they made stops
    with them. A person of the provider is found by subject, a local account by the name
    it acted under; a token made by `manage.py` without `--as` has no person behind it."""
    if token.created_by_subject:
        active = list(
            User.objects.filter(identity__subject=token.created_by_subject).values_list(
                "is_active", flat=True
            )
        )
        return not active or not all(active)
    channel, _, username = token.created_by.partition(":")
    found = User.objects.filter(username=username).values_list("is_active", flat=True).first()
    if found is None:
        return channel == "admin"  # the admin's pages are used by users only: this one is gone
    return not found


def _log(operation: str, token: ApiToken, actor: access.Actor) -> None:
    # Never the token itself: its prefix tells it apart.
    fields = {
        "action": "operator_action",
        "operation": operation,
        "actor": actor.name,
        "token": token.name,
        "prefix": token.prefix,
        "roles": token.roles,
        "namespaces": token.namespaces,
        "expires": token.expires_at.isoformat(),
    }
    if actor.subject:
        fields["actor_subject"] = actor.subject
    message = f"operator {actor.name} did {operation} {token.name}"
    transaction.on_commit(lambda: logger.info(message, extra=fields))
