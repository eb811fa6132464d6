"""The shapes the REST API answers with, for its OpenAPI document.

The views answer with the service functions' own dicts (workflows.operators.selectors,
bypasses: the same camelCase shapes `manage.py workflows ... -o json` prints), so the API
and the CLI cannot drift apart; these serializers only describe them to drf-spectacular.
schemathesis checks every answer against them (tests/api/test_schemathesis.py).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from hooksvc.contract import catalog
from workflows.models import Run, StepRun
from workflows.operators import access, bulk, states

#: The choice sets the document names as enums (SPECTACULAR_SETTINGS' ENUM_NAME_OVERRIDES).
HOOKS = list(catalog.BYPASSABLE)
MOMENTS = list(catalog.MOMENTS)
RUN_STATES = list(Run.State.values)
STEP_STATES = list(StepRun.State.values)
DISPLAY_STATES = list(states.State.values)
BULK_ACTIONS = list(bulk.ACTIONS)


def _shape(name: str, fields: dict[str, serializers.Field[Any, Any, Any, Any]]) -> type:
    """A serializer class named `name` (the schema component) with `fields`, whose names
    may be anything the wire has (`with` is a Python keyword)."""
    return type(name, (serializers.Serializer,), {"Meta": type("Meta", (), {}), **fields})


def _time() -> serializers.DateTimeField:
    return serializers.DateTimeField(allow_null=True)


def _text() -> serializers.CharField:
    return serializers.CharField(allow_blank=True)


def _object() -> serializers.DictField:
    return serializers.DictField(child=serializers.JSONField())


Cluster = _shape(
    "Cluster",
    {"namespace": _text(), "name": _text(), "key": _text()},
)
CurrentStep = _shape(
    "CurrentStep",
    {
        "name": serializers.CharField(),
        "type": serializers.CharField(),
        "state": serializers.ChoiceField(choices=STEP_STATES),
    },
)
Machine = _shape(
    "Machine",
    {
        "namespace": serializers.CharField(),
        "name": serializers.CharField(),
        "desiredSpec": serializers.CharField(help_text="the digest of its desired spec"),
    },
)
RunSummary = _shape(
    "RunSummary",
    {
        "id": serializers.IntegerField(),
        "template": serializers.CharField(),
        "templateGeneration": serializers.IntegerField(),
        "hook": serializers.ChoiceField(choices=MOMENTS),
        "cluster": Cluster(),
        "moment": _text(),
        "machine": Machine(allow_null=True, help_text="UpdateMachine: the Machine it updates"),
        "state": serializers.ChoiceField(choices=RUN_STATES),
        "displayState": serializers.ChoiceField(choices=DISPLAY_STATES),
        "released": serializers.BooleanField(),
        "deadlineExceeded": serializers.BooleanField(),
        "message": _text(),
        "currentStep": CurrentStep(allow_null=True),
        "why": _text(),
        "createdAt": serializers.DateTimeField(),
        "startedAt": _time(),
        "finishedAt": _time(),
        "deadlineAt": _time(),
    },
)
Step = _shape(
    "Step",
    {
        "name": serializers.CharField(),
        "type": serializers.CharField(),
        "state": serializers.ChoiceField(choices=STEP_STATES),
        "dependsOn": serializers.ListField(child=serializers.CharField()),
        "with": _object(),
        "failures": serializers.IntegerField(),
        "retries": serializers.IntegerField(),
        "timeoutSeconds": serializers.IntegerField(allow_null=True),
        "startedAt": _time(),
        "finishedAt": _time(),
        "dueAt": _time(),
        "message": _text(),
        "output": _object(),
    },
)
Event = _shape(
    "Event",
    {
        "at": serializers.DateTimeField(),
        "kind": serializers.CharField(),
        "name": serializers.CharField(),
        "step": _text(),
        "actor": _text(),
        "actorSubject": _text(),
        "actorEmail": _text(),
        "reason": _text(),
        "message": _text(),
    },
)
RunDetail = _shape(
    "RunDetail",
    {
        **RunSummary._declared_fields,  # type: ignore[attr-defined]
        "context": _object(),
        "steps": Step(many=True),
        "events": Event(many=True),
    },
)
ActionResult = _shape(
    "ActionResult",
    {
        "changed": serializers.BooleanField(
            help_text="false: the run was already as the action leaves it; nothing recorded"
        ),
        "detail": serializers.CharField(),
        "run": RunSummary(),
    },
)
BulkOutcome = _shape(
    "BulkOutcome",
    {
        "run": serializers.IntegerField(),
        "cluster": serializers.CharField(),
        "ok": serializers.BooleanField(),
        "changed": serializers.BooleanField(),
        "message": serializers.CharField(),
    },
)
BulkResult = _shape(
    "BulkResult",
    {
        "action": serializers.ChoiceField(choices=list(bulk.ACTIONS)),
        "done": serializers.IntegerField(),
        "refused": serializers.IntegerField(),
        "outcomes": BulkOutcome(many=True),
    },
)
Bypass = _shape(
    "Bypass",
    {
        "id": serializers.IntegerField(),
        "hook": serializers.ChoiceField(choices=HOOKS),
        "namespace": _text(),
        "selector": _text(),
        "actor": serializers.CharField(),
        "actorSubject": _text(),
        "actorEmail": _text(),
        "reason": serializers.CharField(),
        "createdAt": serializers.DateTimeField(),
        "expiresAt": serializers.DateTimeField(),
        "endedAt": _time(),
        "endedBy": _text(),
        "endReason": _text(),
        "inForce": serializers.BooleanField(),
    },
)
RolloutMember = _shape(
    "RolloutMember",
    {
        "runId": serializers.IntegerField(),
        "cluster": serializers.CharField(),
        "state": serializers.ChoiceField(choices=STEP_STATES),
        "why": _text(),
    },
)
RolloutWave = _shape(
    "RolloutWave",
    {
        "template": serializers.CharField(),
        "canaries": serializers.CharField(),
        "clusters": RolloutMember(many=True),
    },
)
Rollout = _shape(
    "Rollout",
    {
        "version": serializers.CharField(),
        # abandoned (it stays listed while its failed runs hold), halted, or waiting.
        "state": serializers.ChoiceField(choices=["waiting", "halted", "abandoned"]),
        "halt": _text(),
        "abandoned": _text(),
        "waves": RolloutWave(many=True),
    },
)
RolloutAction = _shape(
    "RolloutAction",
    {
        "id": serializers.IntegerField(),
        "version": serializers.CharField(),
        "kind": serializers.ChoiceField(choices=["resume", "abandon"]),
        "runs": serializers.ListField(child=serializers.IntegerField()),
        "actor": serializers.CharField(),
        "reason": serializers.CharField(),
        "createdAt": serializers.DateTimeField(),
    },
)
Definition = _shape(
    "Definition",
    {
        "name": serializers.CharField(),
        "kind": serializers.ChoiceField(choices=["WorkflowTemplate", "AddonProfile"]),
        "hook": serializers.CharField(allow_null=True),
        "generation": serializers.IntegerField(),
        "managedBy": _text(),
        "source": serializers.CharField(help_text="where it comes from, and where it changes"),
        "editable": serializers.BooleanField(help_text="whether the API may change it"),
        "spec": _object(),
        "createdAt": serializers.DateTimeField(),
        "updatedAt": serializers.DateTimeField(),
    },
)
DefinitionWritten = _shape(
    "DefinitionWritten",
    {
        "outcome": serializers.ChoiceField(choices=["created", "updated", "unchanged"]),
        "generated": serializers.DictField(
            child=serializers.ListField(child=serializers.CharField())
        ),
        "definition": Definition(),
    },
)


def _scope() -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="null: every namespace; else the namespaces named (maybe none)",
    )


Me = _shape(
    "Me",
    {
        "name": serializers.CharField(help_text="how actions are recorded: token:, api:"),
        "subject": _text(),
        "email": _text(),
        "credential": serializers.ChoiceField(choices=["token", "provider", "session"]),
        "grants": _shape(
            "Grants",
            {p.value: _scope() for p in access.Permission},
        )(),
    },
)
