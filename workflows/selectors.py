"""Reads for operators: runs by filter, a run with its steps and events, a hook call's preview.

The shapes returned are plain JSON-ready dicts in camelCase; `manage.py workflows`
prints them as tables or as `-o json`, so scripts and people see the same fields.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db.models import QuerySet

from hooksvc import wire
from workflows import selection
from workflows.models import Run, RunEvent, StepRun, WorkflowTemplate


def runs_list(
    *,
    state: str | None = None,
    hook: str | None = None,
    cluster_namespace: str | None = None,
    cluster_name: str | None = None,
    template: str | None = None,
) -> QuerySet[Run]:
    """Runs matching every given filter, newest first."""
    runs = Run.objects.order_by("-created_at", "-id")
    if state:
        runs = runs.filter(state=state)
    if hook:
        runs = runs.filter(hook=hook)
    if cluster_namespace is not None:
        runs = runs.filter(cluster_namespace=cluster_namespace)
    if cluster_name is not None:
        runs = runs.filter(cluster_name=cluster_name)
    if template:
        runs = runs.filter(template_name=template)
    return runs


def _time(value: datetime.datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") if value else None


def run_summary(run: Run) -> dict[str, Any]:
    """One run as `workflows list -o json` shows it."""
    return {
        "id": run.pk,
        "template": run.template_name,
        "templateGeneration": run.template_generation,
        "hook": run.hook,
        "cluster": {
            "namespace": run.cluster_namespace,
            "name": run.cluster_name,
            "key": run.cluster_key,
        },
        "moment": run.moment,
        "state": run.state,
        "released": run.released,
        "deadlineExceeded": run.deadline_exceeded,
        "message": run.message,
        "createdAt": _time(run.created_at),
        "startedAt": _time(run.started_at),
        "finishedAt": _time(run.finished_at),
        "deadlineAt": _time(run.deadline_at),
    }


def _step(step: StepRun) -> dict[str, Any]:
    return {
        "name": step.name,
        "type": step.type,
        "state": step.state,
        "dependsOn": step.depends_on,
        "with": step.params,
        "failures": step.failures,
        "retries": step.retries,
        "timeoutSeconds": step.timeout_seconds,
        "startedAt": _time(step.started_at),
        "finishedAt": _time(step.finished_at),
        "dueAt": _time(step.due_at),
        "message": step.message,
        "output": step.output,
    }


def _event(event: RunEvent) -> dict[str, Any]:
    return {
        "at": _time(event.at),
        "kind": event.kind,
        "name": event.name,
        "step": event.step_name,
        "actor": event.actor,
        "reason": event.reason,
        "message": event.message,
    }


def run_detail(run_id: int) -> dict[str, Any] | None:
    """One run with its context, steps (in order) and events (oldest first); None if absent."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return None
    return {
        **run_summary(run),
        "context": run.context,
        "steps": [_step(s) for s in run.steps.order_by("position")],
        "events": [_event(e) for e in run.events.order_by("at", "id")],
    }


def call_preview(call: wire.HookCall) -> dict[str, Any]:
    """What `call` would start: each template of its hook, whether it matches, its steps.

    Reads only; an existing run for the same moment is shown, since the call would
    answer from it instead of starting a new one.
    """
    moment = selection.moment_key(call)
    templates = []
    for template in WorkflowTemplate.objects.filter(hook=call.hook.name).order_by("name"):
        matches = selection.matches(template.spec, call)
        existing = Run.objects.filter(
            template_name=template.name,
            hook=call.hook.name,
            cluster_key=call.cluster.key,
            moment=moment,
        ).first()
        templates.append(
            {
                "name": template.name,
                "generation": template.generation,
                "matches": matches,
                "existingRun": {"id": existing.pk, "state": existing.state}
                if matches and existing
                else None,
                "steps": [
                    {"name": s["name"], "type": s["type"], "dependsOn": s.get("dependsOn") or []}
                    for s in template.spec.get("steps") or []
                ],
            }
        )
    return {
        "hook": call.hook.name,
        "blocking": call.hook.blocking,
        "cluster": {
            "namespace": call.cluster.namespace,
            "name": call.cluster.name,
            "key": call.cluster.key,
        },
        "moment": moment,
        "templates": templates,
    }
