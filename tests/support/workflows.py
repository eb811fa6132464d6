"""Factories for templates and hook calls, in the engine's normalized spec shape."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from hooksvc.contract import catalog, wire
from tests.support import capi
from workflows.definitions import typed
from workflows.models import WorkflowTemplate
from workflows.steps import registry


def spec(
    hook: str = "BeforeClusterUpgrade", steps: list[dict[str, Any]] | None = None, **fields: Any
) -> dict[str, Any]:
    """A normalized template spec: the typed template's defaults, then `fields` (camelCase)."""
    normalized_steps = []
    for step in steps if steps is not None else [{"name": "only", "type": "noop"}]:
        normalized = {**typed.Step(name=step["name"], type=step["type"]).as_spec(), **step}
        normalized["with"] = registry.validate(normalized["type"], normalized["with"], hook=hook)
        normalized_steps.append(normalized)
    return {**typed.Template(hook=hook).as_spec(), **fields, "steps": normalized_steps}


def template(
    name: str,
    hook: str = "BeforeClusterUpgrade",
    steps: list[dict[str, Any]] | None = None,
    **fields: Any,
) -> WorkflowTemplate:
    return WorkflowTemplate.objects.create(name=name, hook=hook, spec=spec(hook, steps, **fields))


def call(
    hook: str = "BeforeClusterUpgrade", *, cluster: dict[str, Any] | None = None, **fields: Any
) -> wire.HookCall:
    """A parsed HookCall, built from a CAPI-shaped request."""
    body = capi.hook_request(hook, cluster, **fields)
    return wire.parse_hook_call(catalog.HOOKS[hook], json.dumps(body).encode())


#: This process' heartbeat row (queries.sql `worker_beat`).
_HEARTBEAT = re.compile(r'INSERT INTO "?workflows_workerbeat\b')


def without_heartbeat(queries: Iterable[Mapping[str, Any]]) -> list[str]:
    """The statements a CaptureQueriesContext saw, less this process' heartbeat row.

    A claim writes that row in its own transaction whenever the heartbeat thread has not
    written it in the last WORKER_BEAT_SECONDS (workflows.engine.leases `beating`): on a
    busy machine any claim may, so a test that counts a path's statements leaves it out.
    """
    return [q["sql"] for q in queries if not _HEARTBEAT.search(q["sql"])]
