"""Break-glass bypasses as the admin lists them: every one opened, in force or not, read-only.

Opened and ended with `manage.py workflows bypass` (workflows.operators.bypasses); the
fleet's banner shows those in force. This list is their history: who, why, for what, until
when, and who ended one early. Each person sees the bypasses of the namespaces they may
view, and every bypass of all namespaces (which covers their clusters too).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from workflows.models import Bypass
from workflows.operators import access, bypasses
from workflows.operators.admin.common import ReadOnlyMixin, TitledAdmin, actor, badge, when


@admin.register(Bypass)
class BypassAdmin(ReadOnlyMixin, TitledAdmin):
    list_display = (
        "id",
        "status",
        "hook",
        "namespace",
        "selector",
        "actor",
        "reason",
        "opened",
        "until",
        "ended",
    )
    list_filter = ("hook",)
    ordering = ("-created_at", "-id")
    # Who, as the identity provider named them (empty for local accounts and the shell).
    fields = (
        *list_display,
        "end_reason",
        "actor_email",
        "actor_subject",
        "ended_by_email",
        "ended_by_subject",
    )
    readonly_fields = fields

    def has_module_permission(self, request: HttpRequest) -> bool:
        return actor(request).may(access.Permission.VIEW)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is None or obj.namespace == "":
            return actor(request).may(access.Permission.VIEW)
        return actor(request).may(access.Permission.VIEW, obj.namespace)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Bypass]:
        return super().get_queryset(request).filter(bypasses.visible(actor(request)))

    @admin.display(description="state")
    def status(self, bypass: Bypass) -> str:
        if bypass.ended_at is not None:
            return badge("cancelled", "ended")
        if bypass.expires_at <= timezone.now():
            return badge("succeeded", "expired")
        return badge("failed", "in force")

    @admin.display(description="opened", ordering="created_at")
    def opened(self, bypass: Bypass) -> str:
        return when(bypass.created_at)

    @admin.display(description="until", ordering="expires_at")
    def until(self, bypass: Bypass) -> str:
        return when(bypass.expires_at)

    @admin.display(description="ended early")
    def ended(self, bypass: Bypass) -> str:
        return f"{when(bypass.ended_at)} by {bypass.ended_by}" if bypass.ended_at else "-"
