"""Hides credentials in run data shown to people (the admin's run page).

Runs keep their template's snapshot and the hook call's context, which may hold an `http`
step's headers or a setting named like a token. What the engine uses is unchanged; only
what is displayed goes through `redact`. Prefer `headersFromEnv` in templates, so that
the secret is in no template, run or page at all.
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
