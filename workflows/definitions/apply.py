"""Writes of definitions: templates and add-on profiles, whoever asks for them.

Every write of a `WorkflowTemplate` row goes through `template_upsert`, and of an
`AddonProfile` row through `profile_upsert`: `manage.py apply_workflows`
(`templates_apply`), the admin's document forms, the profiles' generated templates
(`templates_sync`) and the resource controller (`workflows.controllers`). So one rule holds
for all of them: the generation goes up only when the hook or the spec changed, writers are
serialised by one advisory lock, and a name belongs to one source (`managed_by`): a
template made with apply_workflows or the admin, one generated from a profile, and one
from a Kubernetes resource never overwrite each other (`SourceConflict`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, transaction

from workflows.definitions import addons, policies, spec
from workflows.models import AddonProfile, WorkflowTemplate
from workflows.policy_model import Policy

#: The policy kinds, written by `policy_upsert`.
POLICY_KINDS = (policies.IN_PLACE, policies.UPGRADE)

#: `managed_by` of what apply_workflows and the admin make.
OPERATOR = ""


class Outcome(enum.StrEnum):
    """What an upsert did (or, in a dry run, would do)."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


def origin(kind: str, name: str, managed_by: str) -> str:
    """Where a template or profile comes from, as the end of a sentence about it."""
    if managed_by.startswith(addons.MANAGED_PREFIX):
        return f"is generated from the AddonProfile {managed_by[len(addons.MANAGED_PREFIX) :]!r}"
    if managed_by == spec.RESOURCE:
        return f"comes from the Kubernetes resource {spec.resource_name(kind, name)}"
    return "was made with apply_workflows or the admin"


class SourceConflict(Exception):
    """The name belongs to a template or profile of another source; nothing was written."""

    def __init__(self, kind: str, name: str, holder: str) -> None:
        super().__init__(f"the {kind} {name!r} {origin(kind, name, holder)}")
        self.kind = kind
        self.name = name
        #: `managed_by` of the row that holds the name.
        self.holder = holder


def lock() -> None:
    """Serialise writers of definitions until the transaction ends (re-entrant within it).

    Two applies at once must not both create a name or prune each other's work, and the
    profiles' dependency graph is checked against what the others committed.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ["apply_workflows"])


def template_upsert(
    *,
    name: str,
    spec_: Mapping[str, Any],
    source: str = OPERATOR,
    dry_run: bool = False,
) -> Outcome:
    """Make the template `name` of `source` hold `spec_`, a spec validated by `spec`.

    The generation goes up only when the hook or the spec changed, so writing the same
    spec twice changes nothing (not even `updated_at`). Raises SourceConflict when the
    name belongs to a template of another source. Runs in the caller's transaction.
    """
    hook = spec_["hook"]
    with transaction.atomic():
        lock()
        template = WorkflowTemplate.objects.select_for_update().filter(name=name).first()
        if template is None:
            if not dry_run:
                WorkflowTemplate.objects.create(
                    name=name, hook=hook, spec=dict(spec_), managed_by=source
                )
            return Outcome.CREATED
        if template.managed_by != source:
            raise SourceConflict("WorkflowTemplate", name, template.managed_by)
        if template.hook == hook and template.spec == spec_:
            return Outcome.UNCHANGED
        if not dry_run:
            template.hook, template.spec = hook, dict(spec_)
            template.generation += 1
            template.save(update_fields=["hook", "spec", "generation", "updated_at"])
        return Outcome.UPDATED


def profile_upsert(*, name: str, spec_: Mapping[str, Any], source: str = OPERATOR) -> Outcome:
    """Make the AddonProfile `name` of `source` hold `spec_`, with the generation rule.

    The caller checks the whole set of profiles (`spec.profile_problems`) and then calls
    `templates_sync`, in the same transaction. Raises SourceConflict like `template_upsert`.
    """
    with transaction.atomic():
        lock()
        profile = AddonProfile.objects.select_for_update().filter(name=name).first()
        if profile is None:
            AddonProfile.objects.create(name=name, spec=dict(spec_), managed_by=source)
            return Outcome.CREATED
        if profile.managed_by != source:
            raise SourceConflict("AddonProfile", name, profile.managed_by)
        if profile.spec == spec_:
            return Outcome.UNCHANGED
        profile.spec = dict(spec_)
        profile.generation += 1
        profile.save(update_fields=["spec", "generation", "updated_at"])
        return Outcome.UPDATED


def policy_upsert(
    *, kind: str, name: str, spec_: Mapping[str, Any], source: str = OPERATOR
) -> Outcome:
    """Make the policy `kind`/`name` of `source` hold `spec_`, with the generation rule of
    `template_upsert`; raises SourceConflict when the name belongs to another source."""
    policies.forget()
    with transaction.atomic():
        lock()
        policy = Policy.objects.select_for_update().filter(kind=kind, name=name).first()
        if policy is None:
            Policy.objects.create(kind=kind, name=name, spec=dict(spec_), managed_by=source)
            return Outcome.CREATED
        if policy.managed_by != source:
            raise SourceConflict(kind, name, policy.managed_by)
        if policy.spec == spec_:
            return Outcome.UNCHANGED
        policy.spec = dict(spec_)
        policy.generation += 1
        policy.save(update_fields=["spec", "generation", "updated_at"])
        return Outcome.UPDATED


def _policies_apply(
    documents: Sequence[spec.Document], *, prune: bool
) -> tuple[list[str], dict[str, list[str]]]:
    """Upsert the policies of `documents` (and prune the operator's others): problems, and
    `kind/name` by outcome."""
    problems: list[str] = []
    report: dict[str, list[str]] = {"created": [], "updated": [], "unchanged": [], "pruned": []}
    for doc in documents:
        try:
            outcome = policy_upsert(kind=doc.kind, name=doc.name, spec_=doc.spec)
        except SourceConflict as exc:
            problems.append(_conflict(doc, exc))
            continue
        report[outcome.value].append(f"{doc.kind}/{doc.name}")
    if prune:
        given = {(d.kind, d.name) for d in documents}
        stale = [
            p for p in Policy.objects.filter(managed_by=OPERATOR) if (p.kind, p.name) not in given
        ]
        report["pruned"] = sorted(f"{p.kind}/{p.name}" for p in stale)
        policies.forget()
        Policy.objects.filter(pk__in=[p.pk for p in stale]).delete()
    return problems, report


def templates_sync(*, dry_run: bool = False) -> dict[str, list[str]]:
    """Make the templates generated from profiles match the stored profiles; names by change.

    Runs in the caller's transaction. Syncing twice changes nothing; runs of deleted
    templates keep their snapshot.
    """
    with transaction.atomic():
        lock()
        profiles = {p.name: p.spec for p in AddonProfile.objects.all()}
        wanted = addons.generate(profiles)
        existing = set(
            WorkflowTemplate.objects.filter(
                managed_by__startswith=addons.MANAGED_PREFIX
            ).values_list("name", flat=True)
        )
        report: dict[str, list[str]] = {"created": [], "updated": [], "deleted": []}
        for name, (profile, template_spec) in wanted.items():
            outcome = template_upsert(
                name=name,
                spec_=template_spec,
                source=addons.managed_by(profile),
                dry_run=dry_run,
            )
            if outcome is not Outcome.UNCHANGED:
                report[outcome.value].append(name)
        report["deleted"] = sorted(existing - set(wanted))
        if report["deleted"] and not dry_run:
            WorkflowTemplate.objects.filter(name__in=report["deleted"]).delete()
    return report


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
    #: Policies, as `Kind/name`, by what applying did to them.
    policies_created: tuple[str, ...] = ()
    policies_updated: tuple[str, ...] = ()
    policies_unchanged: tuple[str, ...] = ()
    policies_pruned: tuple[str, ...] = ()


def templates_apply(
    *, documents: Sequence[spec.Document], prune: bool = False, dry_run: bool = False
) -> ApplyReport:
    """Make the templates match `documents`; with `prune`, delete templates not among them.

    What `manage.py apply_workflows` does once every document is valid: in one
    transaction, kubectl-style. Only templates and profiles made with apply_workflows or
    the admin are written or pruned. Raises SpecError, changing nothing, when profiles
    would depend on unknown profiles or on each other in a cycle, or when a name belongs
    to another source (a generated template, a Kubernetes resource).
    """
    wanted = [d for d in documents if d.kind == "WorkflowTemplate"]
    profile_docs = [d for d in documents if d.kind == "AddonProfile"]
    templates: dict[Outcome, list[str]] = {outcome: [] for outcome in Outcome}
    problems: list[str] = []
    with transaction.atomic():
        lock()
        problems += _generated_names(wanted, profile_docs)
        for doc in wanted:
            try:
                outcome = template_upsert(name=doc.name, spec_=doc.spec, dry_run=dry_run)
            except SourceConflict as exc:
                problems.append(_conflict(doc, exc))
                continue
            templates[outcome].append(doc.name)
        if problems:
            raise spec.SpecError(problems)
        pruned: list[str] = []
        if prune:
            stale = WorkflowTemplate.objects.filter(managed_by=OPERATOR).exclude(
                name__in=[d.name for d in wanted]
            )
            pruned = sorted(stale.values_list("name", flat=True))
            if not dry_run:
                # Runs keep their spec snapshot: Run.template is SET_NULL.
                stale.delete()
        profiles = _profiles_apply(profile_docs, prune=prune)
        policy_problems, policy_report = _policies_apply(
            [d for d in documents if d.kind in POLICY_KINDS], prune=prune
        )
        if policy_problems:
            raise spec.SpecError(policy_problems)
        generated = templates_sync()
        if dry_run:
            # Profiles are written and their templates generated, then all is rolled back:
            # the report says what a real apply would do, computed by the same code.
            transaction.set_rollback(True)
    return ApplyReport(
        created=tuple(templates[Outcome.CREATED]),
        updated=tuple(templates[Outcome.UPDATED]),
        unchanged=tuple(templates[Outcome.UNCHANGED]),
        pruned=tuple(pruned),
        profiles_created=tuple(profiles["created"]),
        profiles_updated=tuple(profiles["updated"]),
        profiles_unchanged=tuple(profiles["unchanged"]),
        profiles_pruned=tuple(profiles["pruned"]),
        generated_created=tuple(generated["created"]),
        generated_updated=tuple(generated["updated"]),
        generated_deleted=tuple(generated["deleted"]),
        policies_created=tuple(policy_report["created"]),
        policies_updated=tuple(policy_report["updated"]),
        policies_unchanged=tuple(policy_report["unchanged"]),
        policies_pruned=tuple(policy_report["pruned"]),
    )


def _conflict(doc: spec.Document, exc: SourceConflict) -> str:
    advice = (
        "change the profile instead"
        if exc.holder.startswith(addons.MANAGED_PREFIX)
        else "rename one of them"
    )
    return f"document {doc.index} ({doc.name}): metadata.name: {exc}; {advice}"


def _generated_names(
    templates: Sequence[spec.Document], profiles: Sequence[spec.Document]
) -> list[str]:
    """Names the file's profiles will generate, taken by templates (or the other way round)."""
    future = {p + d.name: d.name for d in profiles for p in addons.PREFIXES}
    problems = [
        f"document {d.index} ({d.name}): metadata.name: the WorkflowTemplate {d.name!r} would "
        f"be generated from the AddonProfile {future[d.name]!r}; change the profile instead"
        for d in templates
        if d.name in future
    ]
    problems += [
        f"document {d.index} ({d.name}): metadata.name: the WorkflowTemplate {name!r} exists "
        "and is not generated; rename one of them"
        for d in profiles
        for name in addons.clashes([d.name])
    ]
    return problems


def _profiles_apply(documents: Sequence[spec.Document], *, prune: bool) -> dict[str, list[str]]:
    """Create, update (and prune) profiles after checking the graph they will form."""
    existing = {p.name: p for p in AddonProfile.objects.select_for_update()}
    given = {d.name: d.spec for d in documents}
    # --prune removes only what apply_workflows and the admin made.
    kept = {
        n: p.spec
        for n, p in existing.items()
        if n not in given and not (prune and p.managed_by == OPERATOR)
    }
    graph = {name: list(s["dependsOn"]) for name, s in {**kept, **given}.items()}
    problems = spec.profile_problems(graph)
    report: dict[str, list[str]] = {"created": [], "updated": [], "unchanged": [], "pruned": []}
    for doc in documents:
        try:
            outcome = profile_upsert(name=doc.name, spec_=doc.spec)
        except SourceConflict as exc:
            problems.append(_conflict(doc, exc))
            continue
        report[outcome.value].append(doc.name)
    if problems:
        raise spec.SpecError(problems)
    if prune:
        stale = {n for n, p in existing.items() if p.managed_by == OPERATOR} - set(given)
        report["pruned"] = sorted(stale)
        AddonProfile.objects.filter(name__in=report["pruned"]).delete()
    return report
