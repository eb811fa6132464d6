"""Break-glass bypasses as the admin lists them: every one opened, in force or not, read-only.

Opened and ended with `manage.py workflows bypass` (workflows.operators.bypasses); the
fleet's banner shows those in force. This list is their history: who, why, for what, until
when, and who ended one early.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from workflows.models import Bypass
from workflows.operators.admin.common import ReadOnlyMixin, badge, when


@admin.register(Bypass)
class BypassAdmin(ReadOnlyMixin, admin.ModelAdmin):  # type: ignore[type-arg]
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
    fields = (*list_display, "end_reason")
    readonly_fields = fields

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

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
