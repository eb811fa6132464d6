"""Templates and add-on profiles one at a time, for the REST API: read them, and write the
ones hooksvc owns.

A write takes one document, validated exactly as `apply_workflows` and the admin's forms
validate it (workflows.definitions.spec), and goes through the same writers
(workflows.definitions.apply: `template_upsert`, `profile_upsert`, `templates_sync`), so
the generation counts changes, not writes, and writing the same spec twice changes
nothing. Only what apply_workflows or the admin made is written here: a template generated
from a profile changes with its profile, one kept in sync with a Kubernetes resource there
(`apply.SourceConflict`). Writing needs the permission to edit, which is granted in every
namespace or not at all (workflows.operators.access).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.db import transaction

from workflows.definitions import addons, apply, spec
from workflows.models import AddonProfile, WorkflowTemplate
from workflows.operators import access, redaction

KINDS = {"WorkflowTemplate": WorkflowTemplate, "AddonProfile": AddonProfile}


@dataclasses.dataclass(frozen=True)
class Written:
    """What a write did, and the templates regenerated from profiles by it."""

    outcome: apply.Outcome
    generated: dict[str, list[str]]


def summary(obj: WorkflowTemplate | AddonProfile) -> dict[str, Any]:
    kind = "WorkflowTemplate" if isinstance(obj, WorkflowTemplate) else "AddonProfile"
    return {
        "name": obj.name,
        "kind": kind,
        "hook": obj.hook if isinstance(obj, WorkflowTemplate) else None,
        "generation": obj.generation,
        "managedBy": obj.managed_by,
        "source": apply.origin(kind, obj.name, obj.managed_by),
        "editable": obj.managed_by == apply.OPERATOR,
        # Inline header values and credential-like keys: the same redaction as every page.
        "spec": redaction.redact(obj.spec),
        "createdAt": obj.created_at.isoformat(),
        "updatedAt": obj.updated_at.isoformat(),
    }


def document_of(kind: str, name: str, data: Any) -> spec.Document:
    """`data` (a document as apply_workflows reads it) validated as `kind` named `name`;
    the placeholders of a redacted document stand for the stored values."""
    document = spec.validate(with_stored_secrets(kind, name, data), 1)
    if document.kind != kind:
        raise spec.SpecError([f"kind: {kind} is written here, got {document.kind}"])
    if document.name != name:
        raise spec.SpecError([f"metadata.name: must be {name!r}, the name in the path"])
    return document


def with_stored_secrets(kind: str, name: str, data: Any) -> Any:
    """`data` with each redaction placeholder in its spec replaced by the stored object's
    value at that place; a placeholder with nothing behind it is a SpecError."""
    if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
        return data
    stored = KINDS[kind]._default_manager.filter(name=name).values_list("spec", flat=True).first()
    restored, missing = redaction.restore(data["spec"], stored or {}, "spec")
    if missing:
        raise spec.SpecError(redaction.placeholder_problems(missing))
    return {**data, "spec": restored}


def _require_edit(actor: str | access.Actor, kind: str) -> None:
    access.actor_of(actor).require(access.Permission.EDIT, "", f"change {kind}s")


def template_put(*, name: str, data: Any, actor: str | access.Actor) -> Written:
    """Create or replace the template `name` with the document `data`."""
    _require_edit(actor, "WorkflowTemplate")
    document = document_of("WorkflowTemplate", name, data)
    with transaction.atomic():
        # A name a profile generates belongs to that profile: SourceConflict.
        outcome = apply.template_upsert(name=document.name, spec_=document.spec)
    return Written(outcome=outcome, generated={})


def template_delete(*, name: str, actor: str | access.Actor) -> None:
    _require_edit(actor, "WorkflowTemplate")
    with transaction.atomic():
        apply.lock()
        template = WorkflowTemplate.objects.select_for_update().filter(name=name).first()
        if template is None:
            raise WorkflowTemplate.DoesNotExist(f"no WorkflowTemplate {name!r}")
        if template.managed_by != apply.OPERATOR:
            raise apply.SourceConflict("WorkflowTemplate", name, template.managed_by)
        # Runs keep their snapshot (Run.template is SET_NULL).
        template.delete()


def profile_put(*, name: str, data: Any, actor: str | access.Actor) -> Written:
    """Create or replace the profile `name` with the document `data`, and regenerate the
    templates of every profile, in one transaction."""
    _require_edit(actor, "AddonProfile")
    document = document_of("AddonProfile", name, data)
    with transaction.atomic():
        apply.lock()
        others = AddonProfile.objects.exclude(name=name)
        graph = {p.name: list(p.spec["dependsOn"]) for p in others}
        problems = spec.profile_problems({**graph, name: document.spec["dependsOn"]})
        problems += [
            f"metadata.name: the WorkflowTemplate {clash!r} exists and is not generated"
            for clash in addons.clashes([name])
        ]
        if problems:
            raise spec.SpecError(problems)
        outcome = apply.profile_upsert(name=name, spec_=document.spec)
        generated = apply.templates_sync()
    return Written(outcome=outcome, generated=generated)


def profile_delete(*, name: str, actor: str | access.Actor) -> dict[str, list[str]]:
    """Delete the profile `name` and its generated templates (runs keep their snapshot)."""
    _require_edit(actor, "AddonProfile")
    with transaction.atomic():
        apply.lock()
        profile = AddonProfile.objects.select_for_update().filter(name=name).first()
        if profile is None:
            raise AddonProfile.DoesNotExist(f"no AddonProfile {name!r}")
        if profile.managed_by != apply.OPERATOR:
            raise apply.SourceConflict("AddonProfile", name, profile.managed_by)
        # What is left must still form a graph apply_workflows would take.
        graph = {p.name: list(p.spec["dependsOn"]) for p in AddonProfile.objects.exclude(name=name)}
        problems = spec.profile_problems(graph)
        if problems:
            raise spec.SpecError(problems)
        profile.delete()
        return apply.templates_sync()
