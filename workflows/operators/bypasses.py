"""Break glass: open, end and list bypasses, each recorded with who and why.

A bypass makes a hook's matching calls answer Success without starting runs, until it
expires by itself (workflows.hookpath.bypass applies it on the hook path); runs that exist
are left as they are. The CLI (`manage.py workflows bypass`) and the admin's banner use
these. Everything is checked before anything is written, the actor's right to release in
the bypass's namespace too (workflows.operators.access: one without a namespace covers every
namespace, so it needs that right everywhere); once it commits, the action is logged
(`action: operator_action`) with the operator and the reason, as run actions are.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import re
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.db.models import Q

from hooksvc.contract import catalog
from workflows import clock
from workflows.hookpath import bypass as hook_bypass
from workflows.hookpath import labelselector
from workflows.models import Bypass
from workflows.operators import access, reasons

logger = logging.getLogger(__name__)

#: The longest break glass: an emergency measure, not a setting (renew it if need be).
MAX_DURATION = datetime.timedelta(days=7)
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
#: A Kubernetes namespace name (a DNS-1123 label).
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_REASON_LENGTH = Bypass._meta.get_field("reason").max_length or 200


class BypassError(ValueError):
    """A bypass that cannot be opened or ended as asked; the message says why."""


def parse_duration(text: str) -> datetime.timedelta:
    """`90s`, `30m`, `2h`, `1h30m`, `1d`: more than nothing and at most MAX_DURATION."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None:
        raise BypassError(
            f"duration {text!r}: write it as a number with a unit, d, h, m or s (30m, 2h, 1h30m)"
        )
    days, hours, minutes, seconds = (int(n or 0) for n in match.groups())
    duration = datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    if duration <= datetime.timedelta(0):
        raise BypassError(f"duration {text!r}: a bypass must last more than 0 s")
    if duration > MAX_DURATION:
        raise BypassError(f"duration {text!r}: a bypass lasts at most 7d; open another later")
    return duration


def _check(hook: str, selector: str, namespace: str, actor: str, reason: str) -> None:
    if hook not in catalog.BYPASSABLE:
        raise BypassError(f"unknown hook {hook!r}; one of: {', '.join(catalog.BYPASSABLE)}")
    try:
        labelselector.parse(selector)
    except labelselector.SelectorError as exc:
        raise BypassError(f"selector {selector!r}: {exc}") from None
    if len(selector) > (Bypass._meta.get_field("selector").max_length or 0):
        raise BypassError("selector: at most 500 characters")
    if namespace and (len(namespace) > 63 or not _NAMESPACE.fullmatch(namespace)):
        raise BypassError(f"namespace {namespace!r} is not a Kubernetes namespace name")
    if not actor.strip():
        raise BypassError("a bypass needs the operator's name")
    _check_reason(reason)


def _check_reason(reason: str) -> None:
    # The reason goes into every covered answer's message (and the hook-call records):
    # one short line.
    if not reason.strip():
        raise BypassError("a bypass needs a reason")
    wrong = reasons.problem(reason)
    if wrong:
        raise BypassError(wrong)
    if len(reason) > _REASON_LENGTH:
        raise BypassError(f"reason: at most {_REASON_LENGTH} characters (it is in every answer)")
    if any(ord(c) < 32 or ord(c) == 127 for c in reason):
        raise BypassError("reason: one line, without control characters")


def visible(actor: access.Actor) -> Q:
    """The bypasses `actor` sees: those of the namespaces they may view, and every global one
    (which answers for their clusters too)."""
    if actor.may_everywhere(access.Permission.VIEW):
        return Q()  # (Q() | Q(...) would keep only the second)
    return actor.where(access.Permission.VIEW, "namespace") | Q(namespace="")


def _log(operation: str, bypass: Bypass, *, actor: access.Actor, reason: str) -> None:
    fields = {
        "action": "operator_action",
        "operation": operation,
        "actor": actor.name,
        "reason": reason,
        "bypass": bypass.pk,
        "hook": bypass.hook,
        "selector": bypass.selector,
        "namespace": bypass.namespace,
        "expires": bypass.expires_at.isoformat(),
    }
    if actor.subject:
        fields["actor_subject"] = actor.subject
    message = f"operator {actor.name} did {operation} {bypass.pk} of {bypass.hook}"
    transaction.on_commit(lambda: logger.info(message, extra=fields))


def bypass_open(
    *,
    hook: str,
    duration: datetime.timedelta,
    actor: str | access.Actor,
    reason: str,
    selector: str = "",
    namespace: str = "",
) -> Bypass:
    """Answer `hook`'s matching calls Success, starting no run, for `duration` from now."""
    who = access.actor_of(actor)
    _check(hook, selector, namespace, who.name, reason)
    if not datetime.timedelta(0) < duration <= MAX_DURATION:
        raise BypassError("a bypass lasts more than 0 s and at most 7d")
    who.require(access.Permission.RELEASE, namespace, "open bypasses")
    # To the second: the expiry is printed in every covered answer.
    now = clock.now().replace(microsecond=0)
    with transaction.atomic():
        bypass = Bypass.objects.create(
            hook=hook,
            selector=selector.strip(),
            namespace=namespace,
            actor=who.name,
            actor_subject=who.subject,
            actor_email=who.email,
            reason=reason.strip(),
            created_at=now,
            expires_at=now + duration,
        )
        _log("bypass", bypass, actor=who, reason=bypass.reason)
    return bypass


def bypass_end(*, bypass_id: int, actor: str | access.Actor, reason: str) -> Bypass:
    """End a bypass before it expires: matching calls start runs again."""
    who = access.actor_of(actor)
    if not who.name.strip():
        raise BypassError("ending a bypass needs the operator's name")
    _check_reason(reason)
    with transaction.atomic():
        bypass = Bypass.objects.select_for_update().filter(Q(pk=bypass_id) & visible(who)).first()
        if bypass is None:
            raise BypassError(f"bypass {bypass_id} does not exist")
        who.require(access.Permission.RELEASE, bypass.namespace, "end bypasses")
        if bypass.ended_at is not None:
            raise BypassError(f"bypass {bypass_id} was already ended by {bypass.ended_by}")
        now = clock.now()
        if bypass.expires_at <= now:
            raise BypassError(
                f"bypass {bypass_id} already expired at {hook_bypass.until(bypass.expires_at)}"
            )
        bypass.ended_at, bypass.ended_by, bypass.end_reason = now, who.name, reason.strip()
        bypass.ended_by_subject, bypass.ended_by_email = who.subject, who.email
        bypass.save(
            update_fields=[
                "ended_at",
                "ended_by",
                "end_reason",
                "ended_by_subject",
                "ended_by_email",
            ]
        )
        _log("bypass_end", bypass, actor=who, reason=bypass.end_reason)
    return bypass


def active(
    now: datetime.datetime | None = None, *, actor: access.Actor | None = None
) -> list[Bypass]:
    """The bypasses in force (those `actor` sees, if given), expiring first first (one query)."""
    found = Bypass.objects.filter(ended_at__isnull=True, expires_at__gt=now or clock.now())
    if actor is not None:
        found = found.filter(visible(actor))
    return list(found.order_by("expires_at", "id"))


def summary(bypass: Bypass, now: datetime.datetime | None = None) -> dict[str, Any]:
    """A bypass as `bypass --list -o json` and the REST API show it."""

    def at(moment: datetime.datetime | None) -> str | None:
        return moment.isoformat() if moment else None

    return {
        "id": bypass.pk,
        "hook": bypass.hook,
        "namespace": bypass.namespace,
        "selector": bypass.selector,
        "actor": bypass.actor,
        "actorSubject": bypass.actor_subject,
        "actorEmail": bypass.actor_email,
        "reason": bypass.reason,
        "createdAt": at(bypass.created_at),
        "expiresAt": at(bypass.expires_at),
        "endedAt": at(bypass.ended_at),
        "endedBy": bypass.ended_by,
        "endReason": bypass.end_reason,
        "inForce": bypass.ended_at is None and bypass.expires_at > (now or clock.now()),
    }


@dataclasses.dataclass(frozen=True)
class Shown:
    """A bypass as the fleet's banner and `bypass --list` show it."""

    bypass: Bypass
    scope: str
    summary: str


def shown(bypass: Bypass) -> Shown:
    where = f"namespace {bypass.namespace}" if bypass.namespace else "every namespace"
    which = f"clusters matching {bypass.selector}" if bypass.selector else "every cluster"
    scope = f"{bypass.hook} for {which} in {where}"
    return Shown(
        bypass=bypass,
        scope=scope,
        summary=(
            f"bypass {bypass.pk}: {scope}, by {bypass.actor} until "
            f"{hook_bypass.until(bypass.expires_at)}: {bypass.reason}"
        ),
    )


def covering(*, hook: str, namespace: str, labels: Mapping[str, str]) -> hook_bypass.Active | None:
    """The bypass in force that answers `hook`'s calls for a cluster in `namespace` with
    `labels`: the hook path's rows, order and rule (workflows.hookpath.bypass.covering)."""
    in_force = Bypass.objects.filter(
        hook=hook,
        namespace__in=("", namespace),
        ended_at__isnull=True,
        expires_at__gt=clock.now(),
    ).order_by("-expires_at", "id")
    actives = [
        hook_bypass.Active(b.pk, b.selector, b.actor, b.reason, b.expires_at) for b in in_force
    ]
    return hook_bypass.covering_labels(actives, labels)
