"""The admin's run pages: the run list, a run's timeline and history, its confirmed actions.

Runs, steps and events are never edited here: actions call `workflows.operators.actions`,
which change state through transitions and record who did what and why. Each list and page
shows only runs of namespaces the person may view, and offers only the actions their roles
allow there (workflows.operators.access); a forged POST is refused by the same rules.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import content_disposition_header

from workflows import durations
from workflows.models import Run, StepRun
from workflows.operators import access, actions, states
from workflows.operators.admin import common, runpage
from workflows.operators.admin.common import (
    NamespacedMixin,
    ReadOnlyMixin,
    ReasonForm,
    badge,
    json_block,
    may_act,
)
from workflows.steps import artifacts, registry

#: Actions on a whole run, with their labels (a step's are in runpage.STEP_ACTIONS).
RUN_ACTIONS = {
    "retry": "Retry failed steps",
    "cancel": "Cancel the run",
    "release": "Release the hold",
}
STEP_ACTIONS = runpage.STEP_ACTIONS


class StateFilter(admin.SimpleListFilter):
    """The honest state (workflows/operators/states.py): waiting for approval, released, ..."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(state.value), str(state.label)) for state in states.State]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        value = self.value()
        if value not in states.State.values:
            return queryset
        return queryset.filter(states.where(value))


@admin.register(Run)
class RunAdmin(ReadOnlyMixin, NamespacedMixin, common.TitledAdmin):
    list_display = (
        "cluster",
        "hook_moment",
        "template_name",
        "state_badge",
        "progress",
        "created",
        "duration",
    )
    list_filter = (StateFilter, "hook", "cluster_namespace", "template_name")
    search_fields = ("cluster_name",)
    ordering = ("-created_at",)
    list_per_page = 50

    class Media:
        css = {"all": ("workflows/admin.css",)}

    show_full_result_count = False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Viewing only: the change form is read-only and saves nothing.
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        # Progress comes from one aggregate per page, not one query per row.
        queryset: QuerySet[Run] = (
            super()
            .get_queryset(request)
            .annotate(
                steps_total=Count("steps"),
                steps_done=Count("steps", filter=Q(steps__state__in=StepRun.DONE)),
            )
        )
        return states.annotate(queryset)

    @admin.display(description="cluster", ordering="cluster_name")
    def cluster(self, run: Run) -> str:
        return format_html(
            '<span class="hk-nowrap">{}/{}</span>', run.cluster_namespace, run.cluster_name
        )

    @admin.display(description="hook · moment", ordering="hook")
    def hook_moment(self, run: Run) -> str:
        return format_html(
            '{}<div class="hk-quiet">{}</div>', run.hook, common.moment(run) or "once"
        )

    @admin.display(description="created", ordering="created_at")
    def created(self, run: Run) -> str:
        return format_html('<span class="hk-nowrap">{}</span>', common.when(run.created_at))

    @admin.display(description="state", ordering=states.FIELD)
    def state_badge(self, run: Run) -> str:
        state = states.of(run)
        return badge(state, state.label)

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
            '<div class="hooksvc-progress" title="{} of {} {}" '
            'style="width:80px;background:#e9ecef;border-radius:4px">'
            '<div style="width:{}%;background:#198754;height:8px;border-radius:4px"></div>'
            '</div><span class="hk-nowrap">{} of {} {}</span>',
            done,
            total,
            durations.noun(total, "step"),
            percent,
            done,
            total,
            durations.noun(total, "step"),
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
                "<int:run_id>/live/",
                self.admin_site.admin_view(self.live_view),
                name="workflows_run_live",
            ),
            path(
                "<int:run_id>/step/<str:step_name>/file/<str:name>",
                self.admin_site.admin_view(self.artifact_view),
                name="workflows_run_artifact",
            ),
        ]
        return own + super().get_urls()

    def _run(self, request: HttpRequest, run_id: Any) -> Run:
        """The run, if the person may view it; else 404, as for a run that does not exist."""
        visible = Run.objects.filter(common.actor(request).where(access.Permission.VIEW))
        return get_object_or_404(visible, pk=run_id)

    def _run_actions(self, request: HttpRequest, run: Run) -> list[tuple[str, str]]:
        return [
            (label, reverse("admin:workflows_run_action", args=[run.pk, action]))
            for action, label in RUN_ACTIONS.items()
            if _run_action_applies(run, action) and may_act(request, action, run.cluster_namespace)
        ]

    def _live(self, request: HttpRequest, run: Run) -> dict[str, Any]:
        operates = may_act(request, "approve", run.cluster_namespace)
        return runpage.live_context(run, self._run_actions(request, run), step_actions=operates)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The run's own page (runpage): its steps first; nothing on it is a form."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        run = self._run(request, object_id)
        context = {
            **self.admin_site.each_context(request),
            **self._live(request, run),
            "title": f"{run.template_name} on {run.cluster_namespace}/{run.cluster_name}",
            "opts": self.model._meta,
            # Redacted: staff see the shape of an http step's headers, never a credential.
            "spec_shown": json_block(run.spec),
            "context_shown": json_block(run.context),
        }
        return TemplateResponse(request, "admin/workflows/run/detail.html", context)

    def live_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        """The live part of a run's page alone, as the page asks for it while the run is active."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        run = self._run(request, run_id)
        context = self._live(request, run)
        return TemplateResponse(request, "admin/workflows/run/live.html", context)

    def artifact_view(
        self, request: HttpRequest, run_id: int, step_name: str, name: str
    ) -> HttpResponse:
        """A file a step kept (the conformance JUnit), as a download."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        self._run(request, run_id)
        found = artifacts.artifact_get(run_id=run_id, step_name=step_name, name=name)
        if found is None:
            raise Http404(f"run {run_id} step {step_name} has no file {name}")
        response = HttpResponse(bytes(found.content), content_type=found.content_type)
        response["Content-Disposition"] = content_disposition_header(True, found.name)
        return response

    def run_action_view(self, request: HttpRequest, run_id: int, action: str) -> HttpResponse:
        run = self._run(request, run_id)
        if action not in RUN_ACTIONS:
            return HttpResponseRedirect(reverse("admin:workflows_run_change", args=[run_id]))
        return self._confirm(request, run, action, RUN_ACTIONS[action], step_name="")

    def step_action_view(
        self, request: HttpRequest, run_id: int, step_name: str, action: str
    ) -> HttpResponse:
        run = self._run(request, run_id)
        if action not in STEP_ACTIONS:
            return HttpResponseRedirect(reverse("admin:workflows_run_change", args=[run_id]))
        return self._confirm(
            request, run, action, f"{STEP_ACTIONS[action]} step {step_name}", step_name=step_name
        )

    def _confirm(
        self, request: HttpRequest, run: Run, action: str, title: str, *, step_name: str
    ) -> HttpResponse:
        if not may_act(request, action, run.cluster_namespace):
            messages.error(request, common.refusal(action))
            return HttpResponseRedirect(reverse("admin:workflows_run_change", args=[run.pk]))
        form = ReasonForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            actor = common.actor(request)
            try:
                _perform(action, run.pk, step_name, actor=actor, reason=form.cleaned_data["reason"])
            except actions.AlreadyDone as exc:
                # Someone (or an earlier click) did it first: nothing changed, nothing wrong.
                messages.info(request, f"{exc}: nothing changed.")
            except (actions.ActionError, access.Denied) as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, f"{title}: done, recorded as {actor.name}.")
            return HttpResponseRedirect(reverse("admin:workflows_run_change", args=[run.pk]))
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "run": run,
            "form": form,
            "opts": self.model._meta,
            "action": action,
            "step_name": step_name,
            **_what_it_acts_on(run, action, step_name),
        }
        return TemplateResponse(request, "admin/workflows/run/confirm_action.html", context)


def _what_it_acts_on(run: Run, action: str, step_name: str) -> dict[str, Any]:
    """What the confirmation page shows: the approval's text, or the errors a retry repeats."""
    steps = run.steps.order_by("position")
    if step_name:
        steps = steps.filter(name=step_name)
    elif action == "retry":
        steps = steps.filter(state__in=[StepRun.State.FAILED, StepRun.State.CANCELLED])
    else:
        return {"asks": "", "retried": []}
    found = list(steps)
    asks = ""
    if action == "approve" and found:
        asks = registry.asks(found[0].params, waits_for_person=found[0].waits_for_person)
    retried = [(s.name, s.message) for s in found] if action == "retry" else []
    return {"asks": asks, "retried": retried}


def _run_action_applies(run: Run, action: str) -> bool:
    if action == "cancel":
        return not run.is_finished
    if action == "release":
        return not run.released and run.state != Run.State.SUCCEEDED
    return run.state in (Run.State.FAILED, Run.State.CANCELLED)


def _perform(action: str, run_id: int, step_name: str, *, actor: access.Actor, reason: str) -> None:
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
