"""The hook calls CAPI made, as the admin lists them (kept HOOK_CALL_RETENTION_DAYS days).

Each call shows its time to the second and links to the runs it answered from: the runs of
the same cluster, hook and moment (one per matching template); a call that a bypass
answered links to it instead (it answered from no run). Each person sees the calls of the
namespaces they may view (workflows.operators.access).
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from workflows.hookpath import bypass as hook_bypass
from workflows.models import HookCall, Run
from workflows.operators.admin.common import NamespacedMixin, ReadOnlyMixin, TitledAdmin, when

#: How much of an answer's message the list sends (the column shows what fits of it).
MESSAGE_START = 160


def _answered_by() -> QuerySet[Run]:
    return Run.objects.filter(
        cluster_key=OuterRef("cluster_key"), hook=OuterRef("hook"), moment=OuterRef("moment")
    )


@admin.register(HookCall)
class HookCallAdmin(ReadOnlyMixin, NamespacedMixin, TitledAdmin):
    # Fits 1280 px: one line a call (the message cut, whole on hover and on the call's
    # page), the handler on the call's page only (it is the hook's, in kebab case).
    list_display = (
        "time",
        "hook",
        "cluster",
        "moment",
        "answer",
        "message_start",
        "latency",
        "runs",
    )
    list_filter = ("hook", "status", "cluster_namespace")
    search_fields = ("cluster_name",)
    ordering = ("-at",)
    show_full_result_count = False
    #: A page a screen or two long: 50 one-line rows.
    list_per_page = 50

    class Media:
        css = {"all": ("workflows/admin.css",)}

    fields = (
        "time",
        "hook",
        "handler",
        "cluster",
        "cluster_key",
        "moment",
        "status",
        "retry_after",
        "message",
        "latency_ms",
        "runs_answered",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[HookCall]:
        # The first run answered and how many, in the list's own query (no query per row).
        first = _answered_by().order_by("pk").values("pk")[:1]
        count = _answered_by().order_by().values("cluster_key").annotate(n=Count("pk"))
        queryset: QuerySet[HookCall] = (
            super()
            .get_queryset(request)
            .annotate(
                first_run=Subquery(first),
                run_count=Coalesce(Subquery(count.values("n")), 0),
            )
        )
        return queryset

    @admin.display(description="at", ordering="at")
    def time(self, call: HookCall) -> str:
        return when(call.at)

    @admin.display(description="answer", ordering="status")
    def answer(self, call: HookCall) -> str:
        retry = f", retry after {call.retry_after} s" if call.retry_after else ""
        return f"{call.status}{retry}"

    @admin.display(description="latency", ordering="latency_ms")
    def latency(self, call: HookCall) -> str:
        return f"{call.latency_ms:.1f} ms"

    @admin.display(description="cluster", ordering="cluster_name")
    def cluster(self, call: HookCall) -> str:
        return f"{call.cluster_namespace}/{call.cluster_name}"

    @admin.display(description="message")
    def message_start(self, call: HookCall) -> str:
        # A whole hint (up to 500 characters) would push the columns after it off a 1280 px
        # screen and make each row five lines: one line (admin.css cuts it to the column),
        # the whole text on hover and on the call's page.
        shown = (
            call.message
            if len(call.message) <= MESSAGE_START
            else call.message[:MESSAGE_START] + "…"
        )
        return format_html('<span class="hk-line" title="{}">{}</span>', call.message, shown)

    @admin.display(description="runs")
    def runs(self, call: HookCall) -> str:
        bypassed = _bypass_link(call)
        if bypassed:
            return bypassed
        first, count = getattr(call, "first_run", None), getattr(call, "run_count", 0)
        if first is None:
            return "-"
        link = format_html(
            '<a href="{}">run {}</a>', reverse("admin:workflows_run_change", args=[first]), first
        )
        if count > 1:
            return format_html(
                '{} <a href="{}">+{} more</a>',
                link,
                reverse("admin:cluster", args=[call.cluster_namespace, call.cluster_name]),
                count - 1,
            )
        return link

    @admin.display(description="runs it answered from")
    def runs_answered(self, call: HookCall) -> str:
        # A call's runs are of its own cluster, so of a namespace the person may view.
        bypassed = _bypass_link(call)
        if bypassed:
            return format_html("none: {}", bypassed)
        found = Run.objects.filter(
            cluster_key=call.cluster_key, hook=call.hook, moment=call.moment
        ).order_by("pk")
        if not found:
            return "none: no run for this cluster, hook and moment"
        return format_html_join(
            ", ",
            '<a href="{}">run {} ({})</a>',
            (
                (reverse("admin:workflows_run_change", args=[r.pk]), r.pk, r.template_name)
                for r in found
            ),
        )


def _bypass_link(call: HookCall) -> str:
    """A link to the bypass that answered `call`, "" if none did."""
    bypass_id = hook_bypass.answered_by(call.message)
    if bypass_id is None:
        return ""
    return format_html(
        '<a href="{}">bypass {}</a>',
        reverse("admin:workflows_bypass_change", args=[bypass_id]),
        bypass_id,
    )
