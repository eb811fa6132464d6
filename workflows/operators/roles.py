"""The role rules: which identity-provider groups get which roles, in which namespaces.

`HOOKSVC_ROLES_FILE` names a YAML file (in Kubernetes, a ConfigMap mounted read-only):

    rules:
      - group: platform-admins
        roles: [admin]
      - group: team-payments
        roles: [operator]
        namespaces: [payments, payments-staging]

A rule gives the members of `group` its `roles`, in `namespaces` if given, else in every
namespace; a person's grants are the union over every rule their groups match
(workflows.operators.access.merge). The file is read once per process and checked at
startup (workflows.operators.admin.apps): a malformed one stops the process with a message
that names the rule and the field, rather than granting anything by accident.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from workflows.operators.access import Permission, Scope, merge

P = Permission
#: Each role, with what it grants. Every role includes viewing.
ROLES: Mapping[str, frozenset[Permission]] = {
    "viewer": frozenset({P.VIEW}),
    "operator": frozenset({P.VIEW, P.OPERATE}),
    "releaser": frozenset({P.VIEW, P.RELEASE}),
    "editor": frozenset({P.VIEW, P.EDIT}),
    "admin": frozenset(P),
}
#: Roles that cannot be limited to namespaces: templates and profiles are not namespaced.
UNSCOPED_ROLES = frozenset({"editor", "admin"})
#: A Kubernetes namespace name (a DNS-1123 label).
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_KEYS = {"group", "roles", "namespaces"}


@dataclasses.dataclass(frozen=True)
class Rule:
    group: str
    roles: tuple[str, ...]
    #: None: every namespace.
    namespaces: frozenset[str] | None

    def grants(self) -> dict[Permission, Scope]:
        permissions = set().union(*(ROLES[role] for role in self.roles))
        return {permission: self.namespaces for permission in sorted(permissions)}


class RulesError(ValueError):
    """A role rules document that cannot be used; the message names the rule and field."""


def parse(text: str, *, source: str = "role rules") -> tuple[Rule, ...]:
    """The rules of a YAML document; RulesError for anything that is not exactly a rule."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RulesError(f"{source}: not YAML: {exc}") from None
    if data is None:
        return ()
    if not isinstance(data, dict) or set(data) - {"rules"}:
        raise RulesError(f"{source}: write a mapping with one key, `rules`, a list of rules")
    items = data.get("rules") or []
    if not isinstance(items, list):
        raise RulesError(f"{source}: `rules` must be a list")
    return tuple(_rule(item, f"{source}: rules[{i}]") for i, item in enumerate(items))


def rule(item: Any, where: str) -> Rule:
    """One rule (a mapping of group, roles and namespaces), checked as the file's are: an
    API token's scope is written the same way (workflows.operators.tokens)."""
    return _rule(item, where)


def _rule(item: Any, where: str) -> Rule:
    if not isinstance(item, dict):
        raise RulesError(f"{where}: a rule is a mapping with group, roles and namespaces")
    unknown = set(item) - _KEYS
    if unknown:
        raise RulesError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    group = item.get("group")
    if not isinstance(group, str) or not group.strip():
        raise RulesError(f"{where}.group: the group's name, as the groups claim carries it")
    roles = item.get("roles")
    if not isinstance(roles, list) or not roles:
        raise RulesError(f"{where}.roles: a list of roles, from {', '.join(ROLES)}")
    for role in roles:
        if role not in ROLES:
            raise RulesError(f"{where}.roles: unknown role {role!r}; one of {', '.join(ROLES)}")
    namespaces = item.get("namespaces")
    scope: frozenset[str] | None = None
    if namespaces is not None:
        if not isinstance(namespaces, list) or not namespaces:
            raise RulesError(
                f"{where}.namespaces: a list of namespaces; leave it out for every namespace"
            )
        for namespace in namespaces:
            if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
                raise RulesError(
                    f"{where}.namespaces: {namespace!r} is not a Kubernetes namespace name"
                )
        wide = sorted(UNSCOPED_ROLES & set(roles))
        if wide:
            raise RulesError(
                f"{where}: {', '.join(wide)} cannot be limited to namespaces (templates and "
                "profiles serve every namespace); give it in a rule without namespaces"
            )
        scope = frozenset(namespaces)
    return Rule(group=group, roles=tuple(roles), namespaces=scope)


def load(path: Path) -> tuple[Rule, ...]:
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RulesError(f"HOOKSVC_ROLES_FILE {path}: cannot read it: {exc}") from None
    return parse(text, source=f"HOOKSVC_ROLES_FILE {path}")


@functools.cache
def _current(path: str) -> tuple[Rule, ...]:
    return load(Path(path)) if path else ()


def current() -> tuple[Rule, ...]:
    """The rules in force: HOOKSVC_ROLES_FILE's, read once per process; none without it."""
    try:
        return _current(str(settings.ROLES_FILE or ""))
    except RulesError as exc:
        raise ImproperlyConfigured(str(exc)) from None


@receiver(setting_changed)
def _forget(setting: str, **kwargs: Any) -> None:
    # Tests that point ROLES_FILE elsewhere get the new file's rules.
    if setting == "ROLES_FILE":
        _current.cache_clear()


def grants_of(
    groups: Iterable[str], rules: Iterable[Rule] | None = None
) -> dict[Permission, Scope]:
    """What members of `groups` may do, where: the union of the rules their groups match."""
    member = set(groups)
    return merge(
        *(rule.grants() for rule in (current() if rules is None else rules) if rule.group in member)
    )
