"""What the admin's pages share: read-only admins, who may see which rows, page titles,
state badges, the reason form.

Runs, steps, events and hook calls are never edited in the admin (actions go through
`workflows.operators.actions`); these pieces keep every page consistent about it, and about
the permission model (workflows.operators.access): each list, page and count shows only the
namespaces the person may view.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.text import capfirst

from workflows import durations
from workflows.operators import access, identities, reasons, redaction, selectors

STATE_COLOURS = {
    "pending": "#6c757d",
    "running": "#0d6efd",
    "awaiting_approval": "#b8860b",
    "released": "#6f42c1",
    "succeeded": "#198754",
    "failed": "#dc3545",
    "cancelled": "#343a40",
}


class ReadOnlyMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class NamespacedMixin:
    """A model admin whose rows belong to a cluster namespace (`namespace_field`): shown to
    whoever may view somewhere, each row only to those who may view its namespace."""

    namespace_field = "cluster_namespace"

    def has_module_permission(self, request: HttpRequest) -> bool:
        return actor(request).may(access.Permission.VIEW)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is None:
            return actor(request).may(access.Permission.VIEW)
        return actor(request).may(access.Permission.VIEW, getattr(obj, self.namespace_field))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request)  # type: ignore[misc]
        return queryset.filter(actor(request).where(access.Permission.VIEW, self.namespace_field))


class TitledAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """A model admin whose pages say what they show: "Hook calls", "Hook call BeforeCluster…"
    (not Django's "Select hook call to view", "View hook call"); its lists take the page's
    width (the fleet and the breadcrumbs lead to the other lists, not a sidebar)."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {
            "title": capfirst(self.model._meta.verbose_name_plural),
            "is_nav_sidebar_enabled": False,
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        found = self.get_object(request, unquote(object_id))
        # The object's name is in the title: no subtitle repeating it.
        named = {"title": title_of(found), "subtitle": None} if found else {}
        context = {**named, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, context)


def title_of(obj: Any) -> str:
    """An object's page title: its name, after its kind unless the name says it."""
    kind = str(obj._meta.verbose_name)
    text = str(obj)
    return capfirst(text) if text.lower().startswith(kind) else f"{capfirst(kind)} {text}"


def json_block(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(redaction.redact(value), indent=2))


def badge(state: str, label: str | None = None) -> str:
    colour = STATE_COLOURS.get(state, "#6c757d")
    return format_html(
        '<span class="hooksvc-badge" data-state="{}" style="background:{};color:#fff;'
        'padding:2px 8px;border-radius:10px;white-space:nowrap">{}</span>',
        state,
        colour,
        label or state,
    )


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=500, widget=forms.TextInput(attrs={"size": 60}))

    def clean_reason(self) -> str:
        reason = str(self.cleaned_data["reason"])
        wrong = reasons.problem(reason)
        if wrong:
            raise forms.ValidationError(wrong)
        return reason


def actor(request: HttpRequest) -> access.Actor:
    """Who is signed in, as the permission model sees them (once per request)."""
    return identities.actor_of_request(request)


def may_act(request: HttpRequest, action: str, namespace: str | None = None) -> bool:
    """Whether the person may do `action` (an operator action's name) in `namespace`, or
    anywhere without one."""
    return actor(request).may(access.ACTIONS[action], namespace)


def refusal(action: str) -> str:
    """What the admin says to someone who may not do `action` here."""
    return f"You may not {action} runs here: your roles do not allow it in this namespace."


def moment(run: Any) -> str:
    """A run's moment as people read it: v1.32.4 → v1.33.1, the Machine an UpdateMachine
    run updates ("" for once-only hooks)."""
    return selectors.moment_label(run)


def when(moment: datetime.datetime | None) -> str:
    """A time as every page writes it, with its zone: 2025-06-01 12:03:04 UTC ("-": none)."""
    return durations.at(moment)


#: A duration at a glance ("12 min"), as the CLI shows it too.
span = durations.span


def exact_span(seconds: float) -> str:
    """A duration to the second: 4m 07s, 1h 02m 03s."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def between(start: datetime.datetime | None, end: datetime.datetime | None) -> str:
    """The exact duration from `start` to `end` ("-" when it has not started)."""
    if start is None or end is None:
        return "-"
    return exact_span((end - start).total_seconds())
