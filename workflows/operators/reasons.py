"""What an operator's reason must be: their own words, never a hint's placeholder.

Every action records why (workflows.operators.actions, bulk, bypasses), and the hints that
suggest a command (workflows/engine/messages.py) end in `--reason "<why>"`: a hint pasted
as written would record "<why>" as the reason. `problem` refuses that, and any reason that
is only a placeholder (`<reason>`, `<ticket>`), wherever a reason is taken: the CLI, the
admin's forms, and the service functions behind them.
"""

from __future__ import annotations

import re

#: A reason that is a placeholder alone: `<why>`, `< reason >`.
_ONLY_PLACEHOLDER = re.compile(r"<[^<>]*>")
#: The hints' own placeholder, wherever it is in the reason (`<why>: CAB-12`).
_HINT_PLACEHOLDER = re.compile(r"<\s*why\s*>", re.IGNORECASE)


def problem(reason: str) -> str:
    """What is wrong with `reason` as an operator's reason, "" if nothing."""
    text = reason.strip()
    if not text:
        return "a reason is needed: say why you do this"
    if _ONLY_PLACEHOLDER.fullmatch(text) or _HINT_PLACEHOLDER.search(text):
        return (
            f"the reason {text!r} is a hint's placeholder, not a reason: replace it with why "
            "you do this (a ticket, a change window, who agreed)"
        )
    return ""
