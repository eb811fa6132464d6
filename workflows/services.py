"""Writes operators ask for outside the engine: applying workflow template files.

`templates_apply` is what `manage.py apply_workflows` does once every document of the
file has been validated (`workflows.spec.parse`): create, update or prune templates in
one transaction, kubectl-style.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from django.db import connection, transaction

from workflows import spec
from workflows.models import WorkflowTemplate


@dataclasses.dataclass(frozen=True)
class ApplyReport:
    """Template names by what applying did (or, in a dry run, would do) to them."""

    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    pruned: tuple[str, ...] = ()


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
    """
    wanted = [d for d in documents if d.kind == "WorkflowTemplate"]
    created: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    with transaction.atomic():
        _lock_templates()
        existing = {
            t.name: t
            for t in WorkflowTemplate.objects.select_for_update().filter(
                name__in=[d.name for d in wanted]
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
            stale = WorkflowTemplate.objects.exclude(name__in=[d.name for d in wanted])
            pruned = sorted(stale.values_list("name", flat=True))
            if not dry_run:
                # Runs keep their spec snapshot: Run.template is SET_NULL.
                stale.delete()
    return ApplyReport(
        created=tuple(created),
        updated=tuple(updated),
        unchanged=tuple(unchanged),
        pruned=tuple(pruned),
    )
