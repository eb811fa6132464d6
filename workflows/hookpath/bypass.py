"""Break glass on the hook path: which bypass in force covers a call (the answer's words are
workflows.engine.messages.bypassed).

The hook's one query (workflows.engine.sql.TEMPLATES_AND_RUNS) brings the hook's bypasses
that have neither ended nor expired, for the call's namespace or every namespace, the one
lasting longest first; `covering` picks the first whose label selector matches the
cluster. Pure functions: no query. Operators open and end bypasses with
workflows.operators.bypasses.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from hooksvc.contract import wire
from workflows.engine import messages, sql
from workflows.hookpath import labelselector

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Active:
    """A bypass in force, as the hook path reads it."""

    id: int
    selector: str
    actor: str
    reason: str
    expires_at: datetime.datetime


def actives(value: Sequence[Sequence[Any]] | None) -> list[Active]:
    """The bypasses of the query's JSON array (rows of sql.BYPASS_COLUMNS)."""
    found = []
    for row in value or ():
        fields = dict(zip(sql.BYPASS_COLUMNS, row, strict=True))
        expires = datetime.datetime.fromtimestamp(float(fields["expires_at"]), datetime.UTC)
        found.append(Active(**{**fields, "id": int(fields["id"]), "expires_at": expires}))
    return found


@functools.lru_cache(maxsize=256)
def _requirements(selector: str) -> tuple[labelselector.Requirement, ...] | None:
    try:
        return labelselector.parse(selector)
    except labelselector.SelectorError:
        return None


def covering(bypasses: Sequence[Active], call: wire.HookCall) -> Active | None:
    """The first of `bypasses` whose selector matches the call's cluster, None if none does."""
    return covering_labels(bypasses, call.cluster.labels)


def covering_labels(bypasses: Sequence[Active], labels: Mapping[str, str]) -> Active | None:
    """The first of `bypasses` whose selector matches `labels`, None if none does."""
    for bypass in bypasses:
        requirements = _requirements(bypass.selector)
        if requirements is None:
            # Checked when it was opened; a row edited by hand since covers nothing.
            logger.warning(
                "bypass has a malformed selector; it covers no cluster",
                extra={"action": "bypass_malformed", "bypass": bypass.id},
            )
            continue
        if labelselector.matches(requirements, labels):
            return bypass
    return None


#: An expiry as the message and the CLI print it: 2026-11-24 01:00:00 UTC.
until = messages.bypass_until


#: How it started before the admin, the CLI and the messages called it "bypass" everywhere:
#: recorded hook calls of the last HOOK_CALL_RETENTION_DAYS may still say so.
_OLD_PREFIX = "hooksvc break glass "


def message(bypass: Active) -> str:
    """What a call `bypass` covers answers (messages.bypassed)."""
    return messages.bypassed(bypass.id, bypass.actor, bypass.expires_at, bypass.reason)


def answered_by(answer_message: str) -> int | None:
    """The bypass whose `message` this is (a recorded hook call's), None for any other answer."""
    prefixes = (messages.BYPASS_PREFIX, _OLD_PREFIX)
    prefix = next((p for p in prefixes if answer_message.startswith(p)), "")
    if not prefix:
        return None
    number = answer_message.removeprefix(prefix).partition(" by ")[0]
    return int(number) if number.isdigit() else None
