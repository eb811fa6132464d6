"""The REST API's tokens in the admin, for admins only: list them, make one (shown once, on
the page that answers the form, never stored or sent again), revoke some.

Everything goes through workflows.operators.tokens, as `manage.py workflows token` does;
nobody but an admin (every permission in every namespace) sees the page at all.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from workflows.models import ApiToken
from workflows.operators import access, roles, tokens
from workflows.operators.admin.common import ReadOnlyMixin, actor


def _is_admin(request: HttpRequest) -> bool:
    who = actor(request)
    return all(who.may_everywhere(p) for p in access.Permission)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="recorded as token:NAME in what it does")
    roles = forms.MultipleChoiceField(
        choices=[(r, r) for r in roles.ROLES], widget=forms.CheckboxSelectMultiple
    )
    namespaces = forms.CharField(
        required=False,
        help_text="comma-separated; empty: every namespace (editor and admin need that)",
    )
    days = forms.IntegerField(
        min_value=1, max_value=366, initial=90, help_text="days until it expires"
    )


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "name",
        "prefix",
        "roles",
        "namespaces",
        "expires_at",
        "revoked_at",
        "last_used_at",
        "created_by",
    )
    search_fields = ("name",)
    actions = ["revoke"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _is_admin(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _is_admin(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _is_admin(request)

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        if not _is_admin(request):
            raise PermissionDenied
        form = TokenForm(request.POST if request.method == "POST" else None)
        context = {
            **self.admin_site.each_context(request),
            "title": "Make an API token",
            "form": form,
            "opts": self.model._meta,
        }
        if form.is_bound and form.is_valid():
            values = form.cleaned_data
            spaces = [n.strip() for n in values["namespaces"].split(",") if n.strip()]
            try:
                made = tokens.token_create(
                    name=values["name"],
                    role_names=values["roles"],
                    namespaces=spaces or None,
                    lifetime=tokens.parse_lifetime(f"{values['days']}d"),
                    actor=actor(request),
                )
            except (tokens.TokenError, access.Denied) as exc:
                form.add_error(None, str(exc))
            else:
                context |= {"title": f"API token {made.token.name}", "made": made}
        return TemplateResponse(request, "admin/workflows/token.html", context)

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset.filter(revoked_at__isnull=True):
            try:
                tokens.token_revoke(name=token.name, actor=actor(request))
            except (tokens.TokenError, access.Denied) as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, f"token {token.name} revoked")
