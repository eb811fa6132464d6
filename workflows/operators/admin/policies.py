"""In-place and upgrade policies as the admin lists them: read-only, their spec shown as YAML.

They are written with apply_workflows or kubectl (the resource controller); the CanUpdate*
and GenerateUpgradePlan hooks read them (workflows.definitions.policies).
"""

from __future__ import annotations

import yaml
from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from workflows.operators import access
from workflows.operators.admin.common import ReadOnlyMixin, TitledAdmin, actor
from workflows.policy_model import Policy


@admin.register(Policy)
class PolicyAdmin(ReadOnlyMixin, TitledAdmin):
    list_display = ("name", "kind", "source", "generation", "updated_at")
    list_filter = ("kind",)
    ordering = ("kind", "name")
    fields = ("name", "kind", "source", "generation", "created_at", "updated_at", "document")
    readonly_fields = fields

    def has_module_permission(self, request: HttpRequest) -> bool:
        return actor(request).may(access.Permission.VIEW)

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return actor(request).may(access.Permission.VIEW)

    @admin.display(description="source")
    def source(self, obj: Policy) -> str:
        return "Kubernetes resource" if obj.managed_by == "resource" else "apply_workflows"

    @admin.display(description="spec")
    def document(self, obj: Policy) -> str:
        text = yaml.safe_dump(obj.spec, sort_keys=False)
        return format_html("<pre>{}</pre>", text)
