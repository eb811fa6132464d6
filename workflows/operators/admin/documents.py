"""Templates and add-on profiles in the admin, edited as the YAML documents `apply_workflows` reads.

A document is validated by `workflows.definitions.spec` exactly as `apply_workflows` does;
templates generated from an AddonProfile change only with their profile. Anyone who may view
runs may read them; adding, changing and deleting needs the permission to edit, which is
granted in every namespace or not at all (workflows.operators.access).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml
from django import forms
from django.contrib import admin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from workflows.definitions import addons, apply, spec
from workflows.engine import messages
from workflows.models import AddonProfile, WorkflowTemplate
from workflows.operators import access, redaction
from workflows.operators.admin.common import TitledAdmin, actor


def _document(kind: str, name: str, spec_: dict[str, Any]) -> str:
    """An object as the YAML document `apply_workflows` reads, every default spelled out,
    credentials redacted (saved back as shown, the stored values stay)."""
    document = {
        "apiVersion": spec.API_VERSION,
        "kind": kind,
        "metadata": {"name": name},
        "spec": redaction.redact(spec_),
    }
    text: str = yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
    return text


def template_document(template: WorkflowTemplate) -> str:
    return _document("WorkflowTemplate", template.name, template.spec)


_NEW_TEMPLATE = f"""apiVersion: {spec.API_VERSION}
kind: WorkflowTemplate
metadata:
  name: my-workflow
spec:
  hook: BeforeClusterUpgrade
  steps:
    - name: approve
      type: approval
"""


class _DocumentForm(forms.ModelForm):  # type: ignore[type-arg]
    """Edits an object as its whole YAML document, validated as `apply_workflows` does.

    Subclasses name the document `kind`, the text of a new one, and may refuse more in
    `check(doc, others)`; `self.parsed` holds the valid document for `save()`.
    """

    kind = ""
    new_document = ""
    help = ""

    document = forms.CharField(
        widget=forms.Textarea(
            attrs={"rows": 32, "cols": 100, "spellcheck": "false", "class": "vLargeTextField"}
        ),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parsed: spec.Document | None = None
        self.fields["document"].help_text = self.help
        self.fields["document"].initial = (
            self.document_text(self.instance) if self.instance.pk else self.new_document
        )

    def document_text(self, instance: Any) -> str:
        raise NotImplementedError

    def check(self, doc: spec.Document, others: Any) -> list[str]:
        return []

    def clean_document(self) -> str:
        text: str = self.cleaned_data["document"]
        try:
            documents = spec.parse(text)
        except spec.SpecError as exc:
            raise forms.ValidationError(exc.messages) from None
        if len(documents) != 1 or documents[0].kind != self.kind:
            raise forms.ValidationError(
                f"one {self.kind} document is edited here; apply several with "
                f"`{messages.command('apply_workflows -f <file>')}`"
            )
        doc = documents[0]
        if self.instance.pk and doc.name != self.instance.name:
            # Runs are keyed by names: a rename would start every run again.
            raise forms.ValidationError(
                f"metadata.name: cannot change from {self.instance.name!r} here; "
                f"add a new {self.kind} instead"
            )
        others = type(self.instance).objects.exclude(pk=self.instance.pk)
        holder = None if self.instance.pk else others.filter(name=doc.name).first()
        if holder is not None:
            raise forms.ValidationError(
                f"metadata.name: a {self.kind} named {doc.name!r} exists already: it "
                f"{apply.origin(self.kind, doc.name, holder.managed_by)}"
            )
        # The document was shown redacted: its placeholders keep the stored values.
        stored = self.instance.spec if self.instance.pk else {}
        restored, missing = redaction.restore(doc.spec, stored, "spec")
        if missing:
            raise forms.ValidationError(redaction.placeholder_problems(missing))
        doc = dataclasses.replace(doc, spec=restored)
        problems = self.check(doc, others)
        if problems:
            raise forms.ValidationError(problems)
        self.parsed = doc
        return text


class TemplateDocumentForm(_DocumentForm):
    kind = "WorkflowTemplate"
    new_document = _NEW_TEMPLATE
    help = (
        "One WorkflowTemplate document, as `manage.py apply_workflows` reads it. "
        "Editing it changes only new runs."
    )

    class Meta:
        model = WorkflowTemplate
        fields = ("document",)

    def document_text(self, instance: Any) -> str:
        return template_document(instance)

    def save(self, commit: bool = True) -> WorkflowTemplate:
        doc = self.parsed
        if doc is None:
            raise ValueError("save() needs a successful is_valid() first")
        template: WorkflowTemplate = self.instance
        template.name, template.hook, template.spec = doc.name, doc.spec["hook"], doc.spec
        super().save(commit=False)  # the form's bookkeeping (save_m2m); the row is written below
        if commit:
            # The one writer of templates: the generation counts changes, not saves.
            apply.template_upsert(name=doc.name, spec_=doc.spec)
            template.pk = WorkflowTemplate.objects.get(name=doc.name).pk
            template.refresh_from_db()
        return template


class _SourceAdmin(TitledAdmin):
    """Says where a template or profile comes from; only its own source changes it."""

    kind = ""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return actor(request).may(access.Permission.VIEW)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return actor(request).may(access.Permission.VIEW)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return actor(request).may_everywhere(access.Permission.EDIT)

    @admin.display(description="source")
    def source(self, obj: WorkflowTemplate | AddonProfile) -> str:
        if not obj.pk:
            return "apply_workflows or the admin"
        where = f"This {self.kind} {apply.origin(self.kind, obj.name, obj.managed_by)}"
        if obj.managed_by == spec.RESOURCE:
            plural = spec.PLURALS[self.kind]
            return f"{where}: change it there (kubectl edit {plural} {obj.name}, or in git)."
        if obj.managed_by:
            return f"{where}: change the profile."
        return f"{where}."

    # Another source's templates and profiles (a profile's, a resource's) change only there:
    # an edit here would be lost.
    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.managed_by:
            return False
        return actor(request).may_everywhere(access.Permission.EDIT)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.managed_by:
            return False
        return actor(request).may_everywhere(access.Permission.EDIT)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:  # type: ignore[override]
        # Read-only (another source's), the page shows the document as text, not a form.
        editable = obj is None or not obj.managed_by
        return ["source", "document" if editable else "spec_document", *_TIMES]

    @admin.display(description="document")
    def spec_document(self, obj: WorkflowTemplate | AddonProfile) -> str:
        return format_html("<pre>{}</pre>", _document(self.kind, obj.name, obj.spec))


_TIMES = ("generation", "created_at", "updated_at")


@admin.register(WorkflowTemplate)
class WorkflowTemplateAdmin(_SourceAdmin):
    form = TemplateDocumentForm
    kind = "WorkflowTemplate"
    list_display = ("name", "hook", "generation", "managed_by", "updated_at")
    list_filter = ("hook", "managed_by")
    search_fields = ("name",)
    readonly_fields = ("source", "spec_document", *_TIMES)

    def save_model(
        self, request: HttpRequest, obj: WorkflowTemplate, form: Any, change: bool
    ) -> None:
        form.save(commit=True)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowTemplate]) -> None:
        super().delete_queryset(request, queryset.filter(managed_by=""))


def profile_document(profile: AddonProfile) -> str:
    return _document("AddonProfile", profile.name, profile.spec)


_NEW_PROFILE = f"""apiVersion: {spec.API_VERSION}
kind: AddonProfile
metadata:
  name: my-addons
spec:
  clusterDeletionBehavior: RemovePolicies
  addons:
    manifests: []
"""


class ProfileDocumentForm(_DocumentForm):
    kind = "AddonProfile"
    new_document = _NEW_PROFILE
    help = (
        "One AddonProfile document, as `manage.py apply_workflows` reads it. "
        "Saving regenerates its addon-install- and addon-remove- templates."
    )

    class Meta:
        model = AddonProfile
        fields = ("document",)

    def document_text(self, instance: Any) -> str:
        return profile_document(instance)

    def check(self, doc: spec.Document, others: Any) -> list[str]:
        graph = {p.name: list(p.spec["dependsOn"]) for p in others}
        problems = spec.profile_problems({**graph, doc.name: doc.spec["dependsOn"]})
        problems += [
            f"metadata.name: the WorkflowTemplate {name!r} exists and is not generated"
            for name in addons.clashes([doc.name])
        ]
        return problems

    def save(self, commit: bool = True) -> AddonProfile:
        doc = self.parsed
        if doc is None:
            raise ValueError("save() needs a successful is_valid() first")
        profile: AddonProfile = self.instance
        profile.name, profile.spec = doc.name, doc.spec
        super().save(commit=False)  # the form's bookkeeping (save_m2m); the row is written below
        if commit:
            # The profile and its generated templates change in one transaction.
            with transaction.atomic():
                apply.profile_upsert(name=doc.name, spec_=doc.spec)
                apply.templates_sync()
            profile.pk = AddonProfile.objects.get(name=doc.name).pk
            profile.refresh_from_db()
        return profile


@admin.register(AddonProfile)
class AddonProfileAdmin(_SourceAdmin):
    form = ProfileDocumentForm
    kind = "AddonProfile"
    list_display = ("name", "behaviour", "depends_on", "generation", "managed_by", "updated_at")
    search_fields = ("name",)
    readonly_fields = ("source", "spec_document", *_TIMES)

    @admin.display(description="clusterDeletionBehavior")
    def behaviour(self, profile: AddonProfile) -> str:
        return str(profile.spec.get("clusterDeletionBehavior", ""))

    @admin.display(description="dependsOn")
    def depends_on(self, profile: AddonProfile) -> str:
        return ", ".join(profile.spec.get("dependsOn") or []) or "-"

    def save_model(self, request: HttpRequest, obj: AddonProfile, form: Any, change: bool) -> None:
        form.save(commit=True)

    # The profile and its generated templates change in one transaction.
    def delete_model(self, request: HttpRequest, obj: AddonProfile) -> None:
        with transaction.atomic():
            super().delete_model(request, obj)
            apply.templates_sync()

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AddonProfile]) -> None:
        with transaction.atomic():
            super().delete_queryset(request, queryset.filter(managed_by=""))
            apply.templates_sync()
