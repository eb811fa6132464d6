"""Hides credentials in what is shown to people: templates, profiles and runs, in the
admin, the run pages, the REST API and the CLI.

Templates, and the runs' snapshots of them, may hold an `http` step's inline headers; a hook
call's context may hold a setting named like a token. What the engine uses is unchanged;
only what is displayed goes through `redact`. A document shown redacted can be written back
as it is: `restore` puts the stored value where the placeholder stands (the way a form keeps
a password field it does not show). Prefer `headersFromEnv` in templates, so that the
secret is in no template, run or page at all.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"
#: Keys whose values are credentials, wherever they appear.
SENSITIVE_KEY = re.compile(
    r"authorization|token|passw(or)?d|secret|api[-_]?key|cookie|credential|kubeconfig|private",
    re.IGNORECASE,
)


#: Keys whose values only name where a credential is (environment variables): shown as is.
REFERENCE_KEYS = {"headersFromEnv"}


def redact(value: Any, *, all_values: bool = False) -> Any:
    """A copy of `value` with credential values replaced; every header value counts as one."""
    if isinstance(value, dict):
        return {
            key: item
            if key in REFERENCE_KEYS and not all_values
            else REDACTED
            if all_values or SENSITIVE_KEY.search(str(key))
            else redact(item, all_values=str(key).lower() == "headers")
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item, all_values=all_values) for item in value]
    return REDACTED if all_values else value


def restore(written: Any, stored: Any, path: str = "") -> tuple[Any, list[str]]:
    """`written` with each placeholder put back to the value at the same place in `stored`,
    and the places where `stored` has none (an error for the writer to name).

    Lists of objects that have a `name` (a template's steps) are matched by name, so a
    reordered document keeps its credentials; other lists by position.
    """
    if written == REDACTED:
        if stored is _MISSING or stored == REDACTED:
            return written, [path]
        return stored, []
    if isinstance(written, dict):
        old = stored if isinstance(stored, dict) else {}
        out, missing = {}, []
        for key, item in written.items():
            out[key], lost = restore(item, old.get(key, _MISSING), f"{path}.{key}".lstrip("."))
            missing += lost
        return out, missing
    if isinstance(written, list):
        old_items = stored if isinstance(stored, list) else []
        by_name = {o.get("name"): o for o in old_items if isinstance(o, dict) and "name" in o}
        items, missing = [], []
        for index, item in enumerate(written):
            if isinstance(item, dict) and "name" in item:
                match = by_name.get(item["name"], _MISSING)
            else:
                match = old_items[index] if index < len(old_items) else _MISSING
            restored, lost = restore(item, match, f"{path}[{index}]")
            items.append(restored)
            missing += lost
        return items, missing
    return written, []


_MISSING: Any = object()


def placeholder_problems(missing: list[str]) -> list[str]:
    """The messages for places where a written document holds the placeholder and nothing
    stored stands behind it."""
    return [
        f"{where}: {REDACTED} stands for the stored value, and there is none here; "
        "give the value, or name an environment variable in headersFromEnv"
        for where in missing
    ]
