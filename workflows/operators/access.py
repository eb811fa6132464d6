"""Who may do what, and where: the one permission model the admin, the CLI and the API ask.

Four permissions, each granted in every namespace or only in some: view runs (and the hook
calls and bypasses of their clusters), operate them (approve, retry, skip, cancel), release
holds and open or end break-glass bypasses, and edit templates and add-on profiles (which
every namespace's clusters use, so only in every namespace). An `Actor` is who acts (the
name recorded as the actor, the identity provider's subject and e-mail) with those grants.
Pages, counts, bulk actions, commands and the operator actions (workflows.operators.actions,
bypasses) all ask it the same three questions: `may`, `where` (a filter on a queryset) and
`require` (which refuses with `Denied`). Where grants come from is
workflows.operators.identities (users) and workflows.operators.roles (the role rules).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from django.db.models import Q


class Permission(enum.StrEnum):
    VIEW = "view"
    #: approve, retry, skip, cancel
    OPERATE = "operate"
    #: release a hold; open or end a bypass (break glass)
    RELEASE = "release"
    #: edit templates and add-on profiles
    EDIT = "edit"


#: The permission each operator action needs (the names of workflows.operators.actions and
#: the bypass operations).
ACTIONS: Mapping[str, Permission] = {
    "approve": Permission.OPERATE,
    "retry": Permission.OPERATE,
    "skip": Permission.OPERATE,
    "cancel": Permission.OPERATE,
    "release": Permission.RELEASE,
    "bypass": Permission.RELEASE,
    "bypass_end": Permission.RELEASE,
}

#: A permission's reach: None for every namespace, else the namespaces named.
Scope = frozenset[str] | None


class Denied(Exception):
    """The actor may not do this here; the message says what and where, never more."""


@dataclasses.dataclass(frozen=True)
class Actor:
    """Who acts, as recorded, and where they may do what.

    `grants` maps each permission granted to its scope; a permission absent is not granted.
    """

    name: str
    subject: str = ""
    email: str = ""
    grants: Mapping[Permission, Scope] = dataclasses.field(default_factory=dict)

    def scope(self, permission: Permission) -> Scope:
        """Every namespace (None), or the namespaces where `permission` is granted (maybe none)."""
        if permission not in self.grants:
            return frozenset()
        return self.grants[permission]

    def may(self, permission: Permission, namespace: str | None = None) -> bool:
        """Whether `permission` is granted in `namespace`; without one, in any namespace."""
        scope = self.scope(permission)
        if scope is None:
            return True
        return bool(scope) if namespace is None else namespace in scope

    def may_everywhere(self, permission: Permission) -> bool:
        return self.scope(permission) is None

    def where(
        self, permission: Permission = Permission.VIEW, field: str = "cluster_namespace"
    ) -> Q:
        """A filter keeping the rows whose `field` (a namespace) is in the permission's scope.

        Every namespace is `Q()`, which keeps every row when and-ed but disappears when
        or-ed: combine it with `&` (or `.filter`) only."""
        scope = self.scope(permission)
        if scope is None:
            return Q()
        # An empty `__in` matches nothing (Django answers it without a query).
        return Q(**{f"{field}__in": sorted(scope)})

    def require(self, permission: Permission, namespace: str, what: str) -> None:
        """Refuse (`Denied`) unless `permission` is granted in `namespace` ("" for every one)."""
        allowed = (
            self.may_everywhere(permission) if namespace == "" else self.may(permission, namespace)
        )
        if not allowed:
            where = f"in namespace {namespace}" if namespace else "in every namespace"
            raise Denied(f"{self.name} may not {what} {where}")


#: Every permission in every namespace: local superusers, and the shell's CLI.
EVERYTHING: Mapping[Permission, Scope] = {p: None for p in Permission}


def unrestricted(name: str) -> Actor:
    """An actor who may do everything everywhere (a trusted caller: the shell, the engine)."""
    return Actor(name=name, grants=EVERYTHING)


def actor_of(actor: str | Actor) -> Actor:
    """`actor` as an Actor: a plain name is a trusted caller's (see `unrestricted`)."""
    return actor if isinstance(actor, Actor) else unrestricted(actor)


def merge(*grants: Mapping[Permission, Scope]) -> dict[Permission, Scope]:
    """The union of grants: a permission's scopes add up; every namespace absorbs the rest."""
    merged: dict[Permission, Scope] = {}
    for each in grants:
        for permission, scope in each.items():
            if permission in merged:
                before = merged[permission]
                merged[permission] = None if before is None or scope is None else before | scope
            else:
                merged[permission] = scope
    return merged
