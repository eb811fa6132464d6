"""Writes operators ask for outside the engine: applying workflow template files.

`templates_apply` is what `manage.py apply_workflows` does once every document of the
file has been validated (`workflows.spec.parse`): create, update or prune templates and
add-on profiles in one transaction, kubectl-style, then regenerate the templates of the
profiles (`workflows.addons`). Generated templates are never applied or pruned directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from django.db import connection, transaction

from workflows import addons, spec
from workflows.models import AddonProfile, WorkflowTemplate


@dataclasses.dataclass(frozen=True)
class ApplyReport:
    """Template names by what applying did (or, in a dry run, would do) to them."""

    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    pruned: tuple[str, ...] = ()
    #: The same for AddonProfiles.
    profiles_created: tuple[str, ...] = ()
    profiles_updated: tuple[str, ...] = ()
    profiles_unchanged: tuple[str, ...] = ()
    profiles_pruned: tuple[str, ...] = ()
    #: Templates generated from profiles, by what regenerating did to them.
    generated_created: tuple[str, ...] = ()
    generated_updated: tuple[str, ...] = ()
    generated_deleted: tuple[str, ...] = ()


def _lock_templates() -> None:
    """Serialise applies: two at once must not both create a name or prune each other's work."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ["apply_workflows"])
    # SQLite serialises every write transaction already.


def templates_apply(
    *, documents: Sequence[spec.Document], prune: bool = False, dry_run: bool = False
) -> ApplyReport:
    """Make the templates match `documents`; with `prune`, delete templates not among them.

    The generation is bumped only when the hook or the spec changed, so applying the same
    documents twice changes nothing. Runs of a pruned template keep their snapshot.
    Raises SpecError, changing nothing, when profiles would depend on unknown profiles or
    on each other in a cycle, or when a template takes the name of a generated one.
    """
    wanted = [d for d in documents if d.kind == "WorkflowTemplate"]
    profile_docs = [d for d in documents if d.kind == "AddonProfile"]
    created: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    with transaction.atomic():
        _lock_templates()
        _check_names(wanted, profile_docs)
        existing = {
            t.name: t
            for t in WorkflowTemplate.objects.select_for_update().filter(
                name__in=[d.name for d in wanted], managed_by=""
            )
        }
        for doc in wanted:
            hook = doc.spec["hook"]
            template = existing.get(doc.name)
            if template is None:
                created.append(doc.name)
                if not dry_run:
                    WorkflowTemplate.objects.create(name=doc.name, hook=hook, spec=doc.spec)
            elif template.hook != hook or template.spec != doc.spec:
                updated.append(doc.name)
                if not dry_run:
                    template.hook, template.spec = hook, doc.spec
                    template.generation += 1
                    template.save(update_fields=["hook", "spec", "generation", "updated_at"])
            else:
                unchanged.append(doc.name)
        pruned: list[str] = []
        if prune:
            stale = WorkflowTemplate.objects.filter(managed_by="").exclude(
                name__in=[d.name for d in wanted]
            )
            pruned = sorted(stale.values_list("name", flat=True))
            if not dry_run:
                # Runs keep their spec snapshot: Run.template is SET_NULL.
                stale.delete()
        profiles = _profiles_apply(profile_docs, prune=prune)
        generated = addons.templates_sync()
        if dry_run:
            # Profiles are written and their templates generated, then all is rolled back:
            # the report says what a real apply would do, computed by the same code.
            transaction.set_rollback(True)
    return ApplyReport(
        created=tuple(created),
        updated=tuple(updated),
        unchanged=tuple(unchanged),
        pruned=tuple(pruned),
        profiles_created=tuple(profiles["created"]),
        profiles_updated=tuple(profiles["updated"]),
        profiles_unchanged=tuple(profiles["unchanged"]),
        profiles_pruned=tuple(profiles["pruned"]),
        generated_created=tuple(generated["created"]),
        generated_updated=tuple(generated["updated"]),
        generated_deleted=tuple(generated["deleted"]),
    )


def _check_names(templates: Sequence[spec.Document], profiles: Sequence[spec.Document]) -> None:
    """A template must not take a generated template's name (nor the other way round)."""
    generated = set(
        WorkflowTemplate.objects.exclude(managed_by="").values_list("name", flat=True)
    ) | {p + d.name for d in profiles for p in (addons.INSTALL_PREFIX, addons.REMOVE_PREFIX)}
    problems = [
        f"document {d.index} ({d.name}): metadata.name: {d.name!r} is generated from an "
        "AddonProfile; change the profile instead"
        for d in templates
        if d.name in generated
    ]
    problems += [
        f"document {d.index} ({d.name}): metadata.name: the WorkflowTemplate {name!r} exists "
        "and is not generated; rename one of them"
        for d in profiles
        for name in addons.clashes([d.name])
    ]
    if problems:
        raise spec.SpecError(problems)


def _profiles_apply(documents: Sequence[spec.Document], *, prune: bool) -> dict[str, list[str]]:
    """Create, update (and prune) profiles after checking the graph they will form."""
    existing = {p.name: p for p in AddonProfile.objects.select_for_update()}
    given = {d.name: d.spec for d in documents}
    kept = {} if prune else {n: p.spec for n, p in existing.items() if n not in given}
    graph = {name: list(s["dependsOn"]) for name, s in {**kept, **given}.items()}
    problems = spec.profile_problems(graph)
    if problems:
        raise spec.SpecError(problems)
    report: dict[str, list[str]] = {"created": [], "updated": [], "unchanged": [], "pruned": []}
    for doc in documents:
        profile = existing.get(doc.name)
        if profile is None:
            report["created"].append(doc.name)
            AddonProfile.objects.create(name=doc.name, spec=doc.spec)
        elif profile.spec != doc.spec:
            report["updated"].append(doc.name)
            profile.spec = doc.spec
            profile.generation += 1
            profile.save(update_fields=["spec", "generation", "updated_at"])
        else:
            report["unchanged"].append(doc.name)
    if prune:
        report["pruned"] = sorted(set(existing) - set(given))
        AddonProfile.objects.filter(name__in=report["pruned"]).delete()
    return report
