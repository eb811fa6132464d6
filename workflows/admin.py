"""The Django admin: read-only run history with progress; operator actions behind a confirmation.

Runs, steps and events are never edited here: actions call `workflows.actions`, which
change state through transitions and record who did what and why. Templates are edited
as their YAML document and validated by `workflows.spec`, as `apply_workflows` does.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import content_disposition_header

from workflows import actions, addons, artifacts, redaction, spec
from workflows.models import AddonProfile, HookCall, Run, RunEvent, StepRun, WorkflowTemplate

STATE_COLOURS = {
    "pending": "#6c757d",
    "running": "#0d6efd",
    "approval": "#b8860b",
    "succeeded": "#198754",
    "failed": "#dc3545",
    "cancelled": "#343a40",
}

#: Actions on a whole run, and on one step: (label, needs a step, function).
RUN_ACTIONS = {
    "retry": "Retry failed steps",
    "cancel": "Cancel the run",
    "release": "Release the hold",
}
STEP_ACTIONS = {"approve": "Approve", "skip": "Skip", "retry": "Retry"}
#: The newest hook calls shown on a run's page.
HOOK_CALLS_SHOWN = 50


class ReadOnlyMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class StepInline(ReadOnlyMixin, admin.TabularInline):  # type: ignore[type-arg]
    model = StepRun
    fields = (
        "name",
        "type",
        "state_badge",
        "failures",
        "started_at",
        "finished_at",
        "message",
        "output",
        "files",
        "step_actions",
    )
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name_plural = "Steps (timeline)"

    @admin.display(description="state")
    def state_badge(self, step: StepRun) -> str:
        waiting_approval = step.type == "approval" and step.state == StepRun.State.WAITING
        return badge(
            "approval" if waiting_approval else step.state,
            "waiting for approval" if waiting_approval else step.state,
        )

    @admin.display(description="files")
    def files(self, step: StepRun) -> str:
        # Names and sizes only: the content stays in the database until it is downloaded.
        found = step.artifacts.values_list("name", "size")
        links = [
            format_html(
                '<a href="{}" download>{}</a> ({} bytes)',
                reverse("admin:workflows_run_artifact", args=[step.run_id, step.name, name]),
                name,
                size,
            )
            for name, size in found
        ]
        return format_html(" ".join(["{}"] * len(links)), *links) if links else "-"

    @admin.display(description="actions")
    def step_actions(self, step: StepRun) -> str:
        links = []
        for action, label in STEP_ACTIONS.items():
            if _step_action_applies(step, action):
                url = reverse(
                    "admin:workflows_run_step_action", args=[step.run_id, step.name, action]
                )
                links.append(format_html('<a class="button" href="{}">{}</a>', url, label))
        return format_html(" ".join(["{}"] * len(links)), *links) if links else "-"


class EventInline(ReadOnlyMixin, admin.TabularInline):  # type: ignore[type-arg]
    model = RunEvent
    fields = ("at", "kind", "name", "step_name", "actor", "reason", "message")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("-at", "-id")
    verbose_name_plural = "History (transitions and operator actions, newest first)"


def _json_block(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(redaction.redact(value), indent=2))


def badge(state: str, label: str | None = None) -> str:
    colour = STATE_COLOURS.get(state, "#6c757d")
    return format_html(
        '<span class="hooksvc-badge" style="background:{};color:#fff;'
        'padding:2px 8px;border-radius:10px;white-space:nowrap">{}</span>',
        colour,
        label or state,
    )


def _step_action_applies(step: StepRun, action: str) -> bool:
    if action == "approve":
        return step.type == "approval" and step.state not in StepRun.FINISHED
    if action == "skip":
        return step.state not in StepRun.DONE
    return step.state in (StepRun.State.FAILED, StepRun.State.CANCELLED)


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=500, widget=forms.TextInput(attrs={"size": 60}))


@admin.register(Run)
class RunAdmin(ReadOnlyMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "cluster",
        "hook",
        "moment_display",
        "template_name",
        "state_badge",
        "progress",
        "started_at",
        "duration",
    )
    list_filter = ("hook", "state", "cluster_namespace", "template_name")
    search_fields = ("cluster_name",)
    ordering = ("-created_at",)
    list_per_page = 50
    show_full_result_count = False
    inlines = (StepInline, EventInline)
    fields = (
        "template_name",
        "template_generation",
        "hook",
        "cluster_namespace",
        "cluster_name",
        "cluster_key",
        "moment",
        "state_badge",
        "message",
        "created_at",
        "started_at",
        "finished_at",
        "deadline_at",
        "deadline_exceeded",
        "released",
        "spec_shown",
        "context_shown",
    )
    readonly_fields = fields
    change_form_template = "admin/workflows/run/change_form.html"

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Viewing only: the change form is read-only and saves nothing.
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        # Progress comes from one aggregate per page, not one query per row.
        queryset: QuerySet[Run] = (
            super()
            .get_queryset(request)
            .annotate(
                steps_total=Count("steps"),
                steps_done=Count("steps", filter=Q(steps__state__in=StepRun.DONE)),
                steps_approval=Count(
                    "steps", filter=Q(steps__type="approval", steps__state=StepRun.State.WAITING)
                ),
            )
        )
        return queryset

    @admin.display(description="cluster", ordering="cluster_name")
    def cluster(self, run: Run) -> str:
        return f"{run.cluster_namespace}/{run.cluster_name}"

    # The snapshot and context may hold an http step's headers or a token-like setting:
    # staff see their shape, never the credential (workflows/redaction.py).
    @admin.display(description="spec")
    def spec_shown(self, run: Run) -> str:
        return _json_block(run.spec)

    @admin.display(description="context")
    def context_shown(self, run: Run) -> str:
        return _json_block(run.context)

    @admin.display(description="moment", ordering="moment")
    def moment_display(self, run: Run) -> str:
        return run.moment.replace("->", " → ") or "-"

    @admin.display(description="state", ordering="state")
    def state_badge(self, run: Run) -> str:
        if run.state == Run.State.RUNNING and getattr(run, "steps_approval", None):
            return badge("approval", "waiting for approval")
        return badge(run.state)

    @admin.display(description="progress")
    def progress(self, run: Run) -> str:
        total = getattr(run, "steps_total", None)
        if total is None:
            total = run.steps.count()
            done = run.steps.filter(state__in=StepRun.DONE).count()
        else:
            done = getattr(run, "steps_done", 0)
        percent = int(100 * done / total) if total else 0
        return format_html(
            '<div class="hooksvc-progress" title="{} of {} steps" '
            'style="width:120px;background:#e9ecef;border-radius:4px">'
            '<div style="width:{}%;background:#198754;height:8px;border-radius:4px"></div>'
            "</div>{} of {} steps",
            done,
            total,
            percent,
            done,
            total,
        )

    @admin.display(description="duration")
    def duration(self, run: Run) -> str:
        if not run.started_at:
            return "-"
        seconds = int(((run.finished_at or timezone.now()) - run.started_at).total_seconds())
        return (
            f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"
            if seconds >= 3600
            else f"{seconds // 60}m{seconds % 60:02d}s"
        )

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<int:run_id>/action/<str:action>/",
                self.admin_site.admin_view(self.run_action_view),
                name="workflows_run_action",
            ),
            path(
                "<int:run_id>/step/<str:step_name>/<str:action>/",
                self.admin_site.admin_view(self.step_action_view),
                name="workflows_run_step_action",
            ),
            path(
                "<int:run_id>/step/<str:step_name>/file/<str:name>",
                self.admin_site.admin_view(self.artifact_view),
                name="workflows_run_artifact",
            ),
        ]
        return own + super().get_urls()

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        run = get_object_or_404(Run, pk=object_id)
        links = [
            (label, reverse("admin:workflows_run_action", args=[run.pk, action]))
            for action, label in RUN_ACTIONS.items()
            if _run_action_applies(run, action)
        ]
        calls = HookCall.objects.filter(
            cluster_key=run.cluster_key, hook=run.hook, moment=run.moment
        )[:HOOK_CALLS_SHOWN]
        context = {**(extra_context or {}), "run_actions": links, "hook_calls": calls}
        return super().change_view(request, object_id, form_url, context)

    def artifact_view(
        self, request: HttpRequest, run_id: int, step_name: str, name: str
    ) -> HttpResponse:
        """A file a step kept (the conformance JUnit), as a download."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        found = artifacts.artifact_get(run_id=run_id, step_name=step_name, name=name)
        if found is None:
            raise Http404(f"run {run_id} step {step_name} has no file {name}")
        response = HttpResponse(bytes(found.content), content_type=found.content_type)
        response["Content-Disposition"] = content_disposition_header(True, found.name)
        return response

    def run_action_view(self, request: HttpRequest, run_id: int, action: str) -> HttpResponse:
        run = get_object_or_404(Run, pk=run_id)
        if action not in RUN_ACTIONS:
            return HttpResponseRedirect(reverse("admin:workflows_run_change", args=[run_id]))
        return self._confirm(request, run, action, RUN_ACTIONS[action], step_name="")

    def step_action_view(
        self, request: HttpRequest, run_id: int, step_name: str, action: str
    ) -> HttpResponse:
        run = get_object_or_404(Run, pk=run_id)
        if action not in STEP_ACTIONS:
            return HttpResponseRedirect(reverse("admin:workflows_run_change", args=[run_id]))
        return self._confirm(
            request, run, action, f"{STEP_ACTIONS[action]} step {step_name}", step_name=step_name
        )

    def _confirm(
        self, request: HttpRequest, run: Run, action: str, title: str, *, step_name: str
    ) -> HttpResponse:
        if not self._may_act(request):
            messages.error(
                request,
                "Only superusers and users with the 'operate runs' permission can act on runs.",
            )
            return HttpResponseRedirect(reverse("admin:workflows_run_change", args=[run.pk]))
        form = ReasonForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            actor = request.user.get_username()
            try:
                _perform(
                    action,
                    run.pk,
                    step_name,
                    actor=f"admin:{actor}",
                    reason=form.cleaned_data["reason"],
                )
            except actions.ActionError as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, f"{title}: done, recorded as admin:{actor}.")
            return HttpResponseRedirect(reverse("admin:workflows_run_change", args=[run.pk]))
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "run": run,
            "form": form,
            "opts": self.model._meta,
            "action": action,
            "step_name": step_name,
        }
        return TemplateResponse(request, "admin/workflows/run/confirm_action.html", context)

    @staticmethod
    def _may_act(request: HttpRequest) -> bool:
        return bool(request.user.is_superuser or request.user.has_perm("workflows.operate_run"))


def _run_action_applies(run: Run, action: str) -> bool:
    if action == "cancel":
        return not run.is_finished
    if action == "release":
        return not run.released and run.state != Run.State.SUCCEEDED
    return run.state in (Run.State.FAILED, Run.State.CANCELLED)


def _perform(action: str, run_id: int, step_name: str, *, actor: str, reason: str) -> None:
    if action == "approve":
        actions.step_approve(run_id=run_id, step_name=step_name, actor=actor, reason=reason)
    elif action == "skip":
        actions.step_skip(run_id=run_id, step_name=step_name, actor=actor, reason=reason)
    elif action == "retry":
        actions.run_retry(run_id=run_id, step_name=step_name, actor=actor, reason=reason)
    elif action == "cancel":
        actions.run_cancel(run_id=run_id, actor=actor, reason=reason)
    elif action == "release":
        actions.run_release(run_id=run_id, actor=actor, reason=reason)


def _document(kind: str, name: str, spec_: dict[str, Any]) -> str:
    """An object as the YAML document `apply_workflows` reads, every default spelled out."""
    document = {
        "apiVersion": spec.API_VERSION,
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec_,
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
                f"one {self.kind} document is edited here; "
                "apply several with `manage.py apply_workflows`"
            )
        doc = documents[0]
        if self.instance.pk and doc.name != self.instance.name:
            # Runs are keyed by names: a rename would start every run again.
            raise forms.ValidationError(
                f"metadata.name: cannot change from {self.instance.name!r} here; "
                f"add a new {self.kind} instead"
            )
        others = type(self.instance).objects.exclude(pk=self.instance.pk)
        if not self.instance.pk and others.filter(name=doc.name).exists():
            raise forms.ValidationError(
                f"metadata.name: a {self.kind} named {doc.name!r} exists already"
            )
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
        hook = doc.spec["hook"]
        # As apply_workflows: the generation counts changes, not saves.
        if template.pk and (template.hook != hook or template.spec != doc.spec):
            template.generation += 1
        template.name, template.hook, template.spec = doc.name, hook, doc.spec
        saved: WorkflowTemplate = super().save(commit)
        return saved


@admin.register(WorkflowTemplate)
class WorkflowTemplateAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = TemplateDocumentForm
    list_display = ("name", "hook", "generation", "managed_by", "updated_at")
    list_filter = ("hook", "managed_by")
    search_fields = ("name",)
    fields = ("document", "generation", "created_at", "updated_at")
    readonly_fields = ("generation", "created_at", "updated_at")

    # Generated templates change with their AddonProfile only: an edit here would be lost.
    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.managed_by:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.managed_by:
            return False
        return super().has_delete_permission(request, obj)

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
        if profile.pk and profile.spec != doc.spec:
            profile.generation += 1
        profile.name, profile.spec = doc.name, doc.spec
        saved: AddonProfile = super().save(commit)
        return saved


@admin.register(AddonProfile)
class AddonProfileAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = ProfileDocumentForm
    list_display = ("name", "behaviour", "depends_on", "generation", "updated_at")
    search_fields = ("name",)
    fields = ("document", "generation", "created_at", "updated_at")
    readonly_fields = ("generation", "created_at", "updated_at")

    @admin.display(description="clusterDeletionBehavior")
    def behaviour(self, profile: AddonProfile) -> str:
        return str(profile.spec.get("clusterDeletionBehavior", ""))

    @admin.display(description="dependsOn")
    def depends_on(self, profile: AddonProfile) -> str:
        return ", ".join(profile.spec.get("dependsOn") or []) or "-"

    # The profile and its generated templates change in one transaction.
    def save_model(self, request: HttpRequest, obj: AddonProfile, form: Any, change: bool) -> None:
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            addons.templates_sync()

    def delete_model(self, request: HttpRequest, obj: AddonProfile) -> None:
        with transaction.atomic():
            super().delete_model(request, obj)
            addons.templates_sync()

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AddonProfile]) -> None:
        with transaction.atomic():
            super().delete_queryset(request, queryset)
            addons.templates_sync()


@admin.register(HookCall)
class HookCallAdmin(ReadOnlyMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "at",
        "hook",
        "handler",
        "cluster",
        "moment",
        "status",
        "retry_after",
        "message",
        "latency_ms",
    )
    list_filter = ("hook", "status", "cluster_namespace")
    search_fields = ("cluster_name",)
    ordering = ("-at",)
    show_full_result_count = False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    @admin.display(description="cluster", ordering="cluster_name")
    def cluster(self, call: HookCall) -> str:
        return f"{call.cluster_namespace}/{call.cluster_name}"
