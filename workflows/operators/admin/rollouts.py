"""Operators' resumes and abandons of rollouts (RolloutAction), read-only: who, why, when.

Recorded by `manage.py workflows rollout resume|abandon` (workflows.operators.rollouts);
the fleet page shows the rollouts under way and what halts them.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from workflows.operators import access
from workflows.operators.admin.common import ReadOnlyMixin, TitledAdmin, actor
from workflows.rollout_actions import RolloutAction


@admin.register(RolloutAction)
class RolloutActionAdmin(ReadOnlyMixin, TitledAdmin):
    list_display = ("id", "version", "kind", "runs", "actor", "reason", "created_at")
    list_filter = ("kind",)
    ordering = ("-created_at", "-id")
    fields = (*list_display, "actor_email", "actor_subject")
    readonly_fields = fields

    def has_module_permission(self, request: HttpRequest) -> bool:
        return actor(request).may(access.Permission.VIEW)

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return actor(request).may(access.Permission.VIEW)
