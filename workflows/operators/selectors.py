"""Reads for operators: runs by filter, a run with its steps and events, a hook call's preview,
the step each run is at (for lists), a cluster's runs, a run's hook calls. The fleet's reads
are workflows.operators.fleet's.

The shapes returned are plain JSON-ready dicts in camelCase; `manage.py workflows`
prints them as tables or as `-o json`, so scripts and people see the same fields. Every read
of runs takes the `actor` who asks and finds only what they may view
(workflows.operators.access): the admin, the CLI and the API see the same.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db.models import (
    Case,
    IntegerField,
    OuterRef,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform

from hooksvc.contract import machines, wire
from workflows.definitions import typed
from workflows.hookpath import bypass as hook_bypass
from workflows.hookpath import selection
from workflows.models import HookCall, Run, RunEvent, StepRun, WorkflowTemplate
from workflows.operators import access, bypasses, holding, redaction, states
from workflows.steps import registry

#: The hook whose runs update a Machine in place (their moment names it).
UPDATE_MACHINE = "UpdateMachine"


def runs_list(
    *,
    actor: access.Actor,
    state: str | None = None,
    hook: str | None = None,
    cluster_namespace: str | None = None,
    cluster_name: str | None = None,
    template: str | None = None,
) -> QuerySet[Run]:
    """Runs matching every given filter, newest first, with their display state and current
    step (`states.annotate`, `with_current_step`). `state` is a display state; ValueError
    names the states when it is unknown."""
    runs = Run.objects.filter(actor.where()).order_by("-created_at", "-id")
    if state:
        runs = runs.filter(states.where(state))
    if hook:
        runs = runs.filter(hook=hook)
    if cluster_namespace is not None:
        runs = runs.filter(cluster_namespace=cluster_namespace)
    if cluster_name is not None:
        runs = runs.filter(cluster_name=cluster_name)
    if template:
        runs = runs.filter(template_name=template)
    return with_current_step(states.annotate(runs))


def _time(value: datetime.datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") if value else None


def why(run: Run) -> str:
    """Why a run from `with_current_step` is where it is: the approval's own text
    (`with.message`) while a person is asked, else its current step's error or waiting
    message (with the attempt count and next attempt of a step that is retrying), else the
    run's message."""
    step_state = getattr(run, "step_state", None) or ""
    asks = getattr(run, "step_asks", None) or ""
    if asks and step_state == StepRun.State.WAITING:
        return str(asks)
    message = getattr(run, "step_message", None) or ""
    failures = getattr(run, "step_failures", None) or 0
    if message and step_state == StepRun.State.READY and failures:
        return retrying(
            str(getattr(run, "step_name", "")),
            failures=failures,
            retries=getattr(run, "step_retries", None) or 0,
            error=str(message),
            next_at=getattr(run, "step_due_at", None),
        )
    if message and step_state in (StepRun.State.FAILED, StepRun.State.WAITING):
        return str(message)
    return run.message


def attempts(failures: int, retries: int) -> str:
    """Failed attempts in a row of those the step's count allows: "attempt 2 of 4"; past
    the count (a step whose budget is also in time), the attempt alone."""
    allowed = retries + 1
    return f"attempt {failures} of {allowed}" if failures <= allowed else f"attempt {failures}"


def retrying(
    step: str, *, failures: int, retries: int, error: str, next_at: datetime.datetime | None
) -> str:
    """What a step that failed and waits to be tried again is doing, for an operator (never
    a hook's answer: it names a time and a count)."""
    again = f"; next attempt at {holding.at(next_at)}" if next_at else ""
    return f"retrying step {step}: {attempts(failures, retries)} failed: {error}{again}"


#: Runs that ended without success: a run that waits for one waits for a person.
_STOPPED = (Run.State.FAILED, Run.State.CANCELLED)


def blocked_by(run: Run, *, actor: access.Actor) -> Run | None:
    """The failed or cancelled run that keeps a pending `run` from starting (its waitFor),
    by the rule of workflows.engine.scheduling's start check; None if none does (or the
    actor may not view it)."""
    spec = typed.of(run.spec)
    if run.state != Run.State.PENDING or not spec.holds_lifecycle:
        return None
    for other in spec.wait_for:
        runs = Run.objects.filter(actor.where()).filter(
            cluster_key=run.cluster_key, template_name=other
        )
        if runs.filter(state__in=Run.ACTIVE).exists():
            return None  # waiting for it to finish: nothing for a person to do
        latest = runs.order_by("-pk").first()
        if latest is not None and latest.state in _STOPPED and not latest.released:
            return latest
    return None


def machine(run: Run) -> dict[str, str] | None:
    """The Machine an UpdateMachine run updates in place (None for other runs): its
    namespace (the run's cluster's), name and the digest of its desired spec."""
    found = machines.machine_of(run.moment) if run.hook == UPDATE_MACHINE else None
    if found is None:
        return None
    return {"namespace": run.cluster_namespace, "name": found[0], "desiredSpec": found[1]}


def moment_label(run: Run) -> str:
    """A run's moment as people read it: v1.32.4 → v1.33.1, Machine md-0-abcde (desired
    spec 3f2a...), "" for once-only hooks."""
    found = machine(run)
    if found is not None:
        return f"Machine {found['name']} (desired spec {found['desiredSpec']})"
    return str(run.moment).replace("->", " \N{RIGHTWARDS ARROW} ")


def run_summary(run: Run) -> dict[str, Any]:
    """One run as `workflows list -o json` shows it (a run from `runs_list`)."""
    step_name = getattr(run, "step_name", None)
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
        "machine": machine(run),
        "state": run.state,
        "displayState": states.of(run).value,
        "released": run.released,
        "deadlineExceeded": run.deadline_exceeded,
        "message": run.message,
        "currentStep": {
            "name": step_name,
            "type": getattr(run, "step_type", None),
            "state": getattr(run, "step_state", None),
        }
        if step_name
        else None,
        "why": why(run),
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
        "with": redaction.redact(step.params),
        "failures": step.failures,
        "retries": step.retries,
        "timeoutSeconds": step.timeout_seconds,
        "startedAt": _time(step.started_at),
        "finishedAt": _time(step.finished_at),
        "dueAt": _time(step.due_at),
        "message": step.message,
        "output": redaction.redact(step.output),
    }


def _event(event: RunEvent) -> dict[str, Any]:
    return {
        "at": _time(event.at),
        "kind": event.kind,
        "name": event.name,
        "step": event.step_name,
        "actor": event.actor,
        "actorSubject": event.actor_subject,
        "actorEmail": event.actor_email,
        "reason": event.reason,
        "message": event.message,
    }


def run_detail(run_id: int, *, actor: access.Actor) -> dict[str, Any] | None:
    """One run with its context, steps (in order) and events (oldest first); None if absent
    (or not the actor's to see)."""
    run = runs_list(actor=actor).filter(pk=run_id).first()
    if run is None:
        return None
    return {
        **run_summary(run),
        # Credentials a template or a hook call carried are not shown (redaction).
        "context": redaction.redact(run.context),
        "steps": [_step(s) for s in run.steps.order_by("position")],
        "events": [_event(e) for e in run.events.order_by("at", "id")],
    }


def call_preview(call: wire.HookCall, *, actor: access.Actor) -> dict[str, Any]:
    """What `call` would start: each template of its hook, whether it matches, its steps.

    Reads only; an existing run for the same moment is shown, since the call would
    answer from it instead of starting a new one, and so is a break-glass bypass that would
    answer it instead (when a template matches, as on the hook path). The actor must be
    able to view the cluster's namespace (access.Denied otherwise).
    """
    actor.require(access.Permission.VIEW, call.cluster.namespace, "preview calls of clusters")
    moment = selection.moment_key(call)
    templates = []
    for template in WorkflowTemplate.objects.filter(hook=call.hook.name).order_by("name"):
        definition = typed.of(template.spec)
        matches = selection.matches(definition, call)
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
                # Which selector or setting keeps it out ([] when it matches).
                "mismatches": selection.mismatches(definition, call),
                "existingRun": {
                    "id": existing.pk,
                    "state": existing.state,
                    "displayState": states.of(existing).value,
                }
                if matches and existing
                else None,
                "steps": [
                    {"name": s.name, "type": s.type, "dependsOn": list(s.depends_on)}
                    for s in definition.steps
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
        "bypass": _covering_bypass(call) if any(t["matches"] for t in templates) else None,
    }


def _covering_bypass(call: wire.HookCall) -> dict[str, Any] | None:
    """The bypass in force that would answer `call` (operators.bypasses.covering)."""
    covering = bypasses.covering(
        hook=call.hook.name, namespace=call.cluster.namespace, labels=call.cluster.labels
    )
    if covering is None:
        return None
    return {
        "id": covering.id,
        "actor": covering.actor,
        "reason": covering.reason,
        "expiresAt": covering.expires_at.isoformat(),
        "message": hook_bypass.message(covering),
    }


# --- A run's current step, for lists -------------------------------------------------------


def _current_step(field: str) -> Subquery:
    """One field of the step a run is at: a failed one first, then waiting, ready, pending."""
    rank = Case(
        When(state=StepRun.State.FAILED, then=Value(0)),
        When(state=StepRun.State.WAITING, then=Value(1)),
        When(state=StepRun.State.READY, then=Value(2)),
        When(state=StepRun.State.CANCELLED, then=Value(3)),
        default=Value(4),
        output_field=IntegerField(),
    )
    steps = (
        StepRun.objects.filter(run=OuterRef("pk"))
        .exclude(state__in=StepRun.DONE)
        # What a step that waits for a person asks: its `with.message` (StepType.asks).
        .annotate(
            rank=rank,
            asks=Case(
                When(waits_for_person=True, then=KeyTextTransform(registry.ASKS_PARAM, "params")),
                default=Value(None),
            ),
        )
        .order_by("rank", "position")
    )
    return Subquery(steps.values(field)[:1])


def with_current_step(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`runs` annotated with the step each is at (no extra query): `step_name`, `step_type`,
    `step_state`, `step_message` (its progress or last error), `step_asks` (an approval's
    `with.message`), and `step_failures`, `step_retries` and `step_due_at` (a retry's)."""
    return runs.annotate(
        step_name=_current_step("name"),
        step_type=_current_step("type"),
        step_state=_current_step("state"),
        step_message=_current_step("message"),
        step_asks=_current_step("asks"),
        step_failures=_current_step("failures"),
        step_retries=_current_step("retries"),
        step_due_at=_current_step("due_at"),
    )


def cluster_runs(namespace: str, name: str, *, actor: access.Actor) -> list[Run]:
    """Every run of the cluster `namespace/name`, oldest first, with its steps (two queries);
    none when `actor` may not view its namespace."""
    runs = states.annotate(
        Run.objects.filter(actor.where()).filter(cluster_namespace=namespace, cluster_name=name)
    ).prefetch_related("steps")
    return list(runs.order_by("created_at", "pk"))


def hook_calls_of(run: Run, limit: int) -> list[HookCall]:
    """The newest `limit` hook calls that asked about `run`'s moment, newest first."""
    return list(
        HookCall.objects.filter(
            cluster_key=run.cluster_key, hook=run.hook, moment=run.moment
        ).order_by("-at", "-id")[:limit]
    )
