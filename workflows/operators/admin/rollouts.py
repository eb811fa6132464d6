"""Operators' resumes and abandons of rollouts (RolloutAction), read-only: who, why, when.

Recorded by `manage.py workflows rollout resume|abandon` (workflows.operators.rollouts);
the fleet page shows the rollouts under way and what halts them.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html_join

from workflows.operators import access
from workflows.operators.admin.common import ReadOnlyMixin, TitledAdmin, actor
from workflows.rollout_actions import RolloutAction


@admin.register(RolloutAction)
class RolloutActionAdmin(ReadOnlyMixin, TitledAdmin):
    list_display = ("id", "version", "kind", "runs_shown", "actor", "reason", "created_at")
    list_filter = ("kind",)
    ordering = ("-created_at", "-id")
    fields = (*list_display, "actor_email", "actor_subject")
    readonly_fields = fields

    @admin.display(description="runs")
    def runs_shown(self, obj: RolloutAction) -> str:
        """A resume's failed canary runs it set aside, an abandon's runs it failed: each a
        link to its run page (one the reader may not see answers 404 there)."""
        if not obj.runs:
            return "-"
        return format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            ((reverse("admin:workflows_run_change", args=[pk]), pk) for pk in obj.runs),
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return actor(request).may(access.Permission.VIEW)

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return actor(request).may(access.Permission.VIEW)
