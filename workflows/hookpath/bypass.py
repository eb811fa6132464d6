"""Break glass on the hook path: which bypass in force covers a call, and what the answer says.

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
from workflows.engine import sql
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


def until(moment: datetime.datetime) -> str:
    """An expiry as the message and the CLI print it: 2026-11-24 01:00:00 UTC."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


#: How every covered answer's message starts (`message`); `answered_by` reads it back.
MESSAGE_PREFIX = "hooksvc bypass "
#: How it started before the admin, the CLI and the messages called it "bypass" everywhere:
#: recorded hook calls of the last HOOK_CALL_RETENTION_DAYS may still say so.
_OLD_PREFIX = "hooksvc break glass "


def message(bypass: Active) -> str:
    """What a covered call answers: who, why and until when; the same for the same bypass."""
    return (
        f"{MESSAGE_PREFIX}{bypass.id} by {bypass.actor} until {until(bypass.expires_at)}: "
        f"{bypass.reason}; no workflow runs for this call"
    )


def answered_by(answer_message: str) -> int | None:
    """The bypass whose `message` this is (a recorded hook call's), None for any other answer."""
    prefix = next((p for p in (MESSAGE_PREFIX, _OLD_PREFIX) if answer_message.startswith(p)), "")
    if not prefix:
        return None
    number = answer_message.removeprefix(prefix).partition(" by ")[0]
    return int(number) if number.isdigit() else None
