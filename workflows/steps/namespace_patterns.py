"""Namespace lists as Velero reads them: names, and glob patterns matched against the cluster.

`backup_pvs` takes its `namespaces` this way with either backend, so one template means the
same volumes whether hooksvc snapshots them (csi) or Velero backs them up. Follows
vmware-tanzu/velero v1.18.1 (main d30d389b): pkg/util/wildcard/expand.go,
pkg/util/collections/includes_excludes.go, pkg/backup/backup.go getNamespaceIncludesExcludes.

- A name holding `*`, `?` or `[` is a pattern (`containsWildcardPattern`), matched with
  gobwas/glob against the namespaces that exist when the backup runs (`*` any run of
  characters, `?` one, `[abc]` and `[a-z]` one of those); the Backup's spec keeps the
  pattern as it was sent. Python's `fnmatch.fnmatchcase` matches the same for every pattern
  the validation below lets through (it refuses `!`, so no `[!...]`).
- `*` alone, or an empty list, is every namespace. Excludes are matched as patterns too
  (`globStringSet.match`).
- Patterns that match no namespace select nothing (`ShouldInclude` after an expansion that
  left no include), not everything.
- Refused (`ValidateNamespaceName`, `validateNamespaceName`): `|()!{},`, `**`, an empty or
  unclosed `[]`, and anything that is not a namespace name once `*?[]` are read as `x`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

WILDCARDS = "*?["
#: What gobwas/glob would read as syntax Velero does not support.
UNSUPPORTED = "|()!{},"
#: A namespace name (apimachinery ValidateNamespaceName: a DNS-1123 label).
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def is_pattern(name: str) -> bool:
    return any(char in name for char in WILDCARDS)


def problem(name: str) -> str:
    """Why Velero would refuse `name` in a namespace list, or "" (it is a name or pattern)."""
    if any(char in name for char in UNSUPPORTED):
        return f"{name!r} uses {UNSUPPORTED!r}; a pattern may use * ? and [...] only"
    if "**" in name:
        return f"{name!r} has ** (only single * are allowed)"
    depth_error = _brackets(name)
    if depth_error:
        return f"{name!r} has {depth_error}"
    plain = re.sub(r"[*?\[\]]", "x", name)
    if len(plain) > 63 or not DNS1123_LABEL.fullmatch(plain):
        return (
            f"{name!r} is not a namespace name (lower case letters, digits and '-', "
            "at most 63) nor a pattern of one"
        )
    return ""


def _brackets(name: str) -> str:
    """validateBracePatterns: every `[` closed by a `]` with something between."""
    index = 0
    while index < len(name):
        if name[index] == "]":
            return "a ] without its ["
        if name[index] == "[":
            end = name.find("]", index + 1)
            if end < 0:
                return "a [ without its ]"
            if end == index + 1:
                return "an empty []"
            index = end
        index += 1
    return ""


def selects(includes: Iterable[str], excludes: Iterable[str], namespace: str) -> bool:
    """Whether a backup of `includes` less `excludes` takes `namespace` (one that exists)."""
    includes, excludes = list(includes), list(excludes)
    if any(fnmatch.fnmatchcase(namespace, pattern) for pattern in excludes):
        return False
    if not includes or "*" in includes:
        return True
    return any(fnmatch.fnmatchcase(namespace, pattern) for pattern in includes)


def literal(includes: Iterable[str]) -> list[str] | None:
    """The namespaces to read one by one, or None when they are only known by listing."""
    names = sorted(set(includes))
    if not names or any(is_pattern(name) for name in names):
        return None
    return names
