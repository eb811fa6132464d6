"""Runs: list them with the CLI's filters, read one with its steps and events, and act on
them (approve, retry, skip, cancel, release; one or many) with a reason.

Reads are workflows.operators.selectors' (the shapes of `workflows list -o json` and
`workflows show -o json`); actions are workflows.operators.actions and bulk. A run the
caller may not view is not found (404), one they may view but not act on is refused
(403). An action whose effect is there already answers 200 with `changed: false` and
records nothing; one that does not apply in the run's state is `not_applicable` (409).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, filters, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from hooksvc.contract import catalog
from workflows.api import auth, inputs, problems, shapes
from workflows.models import Run
from workflows.operators import access, actions, bulk, fleet, selectors, states

#: The errors every endpoint can answer, for the OpenAPI document.
ERRORS = {
    (code, problems.MEDIA_TYPE): OpenApiResponse(problems.Problem, description=description)
    for code, description in (
        (400, "invalid input (`invalid`, `parse_error`)"),
        (401, "no credential, or one that does not authenticate"),
        (403, "your roles do not allow it here"),
        (404, "no such object, or none you may view"),
        (409, "it does not apply now (`not_applicable`, `managed_elsewhere`)"),
        (429, "too many requests (see Retry-After)"),
    )
}


def errors(*codes: int) -> dict[Any, OpenApiResponse]:
    return {key: value for key, value in ERRORS.items() if key[0] in codes}


class RunFilter(filters.BaseFilterBackend):
    """The CLI's `workflows list` filters, as query parameters."""

    PARAMETERS = (
        ("state", "a display state", states.State.values),
        ("hook", "the hook (or hooksvc's ClusterDeleted)", list(catalog.MOMENTS)),
        ("namespace", "the cluster's namespace", None),
        ("name", "the cluster's name", None),
        ("template", "the template's name", None),
    )

    def filter_queryset(self, request: Request, queryset: QuerySet[Any], view: Any) -> Any:
        given = {name: request.query_params.get(name) for name, _, _ in self.PARAMETERS}
        bad = {
            name: [f"one of: {', '.join(choices)}"]
            for name, _, choices in self.PARAMETERS
            if choices and given[name] and given[name] not in choices
        }
        # PostgreSQL's text holds no NUL: such a value would end as a 500, not an answer.
        bad.update(
            {
                name: ["must not contain a NUL character"]
                for name, v in given.items()
                if "\x00" in (v or "")
            }
        )
        if bad:
            raise exceptions.ValidationError(bad)
        # The whole query is the service's, as `workflows list` makes it; the view's own
        # queryset is the same call without filters (for the ordering and the pages).
        return selectors.runs_list(
            actor=auth.actor(request),
            state=given["state"] or None,
            hook=given["hook"] or None,
            cluster_namespace=given["namespace"] or None,
            cluster_name=given["name"] or None,
            template=given["template"] or None,
        )

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": name,
                "required": False,
                "in": "query",
                "description": description,
                "schema": {"type": "string", **({"enum": choices} if choices else {})},
            }
            for name, description, choices in self.PARAMETERS
        ]


def result(run_id: int, actor: access.Actor, *, changed: bool, detail: str) -> Response:
    run = selectors.runs_list(actor=actor).filter(pk=run_id).first()
    summary = selectors.run_summary(run) if run is not None else None
    return Response({"changed": changed, "detail": detail, "run": summary})


class RunViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Runs, newest first."""

    lookup_value_regex = "[0-9]{1,18}"
    filter_backends = [RunFilter, filters.OrderingFilter]
    ordering_fields = ["created_at", "id"]
    ordering = ["-created_at", "-id"]

    def get_queryset(self) -> QuerySet[Run]:
        return selectors.runs_list(actor=auth.actor(self.request))

    @extend_schema(responses={200: shapes.RunSummary(many=True), **errors(400, 401, 403, 429)})
    def list(self, request: Request) -> Response:
        """Runs you may view, filtered as `workflows list` filters them."""
        runs = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(runs)
        return self.get_paginated_response([selectors.run_summary(r) for r in page or []])

    @extend_schema(responses={200: shapes.RunDetail, **errors(401, 403, 404, 429)})
    def retrieve(self, request: Request, pk: str) -> Response:
        """A run with its steps and events, as `workflows show -o json` prints it."""
        found = selectors.run_detail(int(pk), actor=auth.actor(request))
        if found is None:
            raise exceptions.NotFound(f"run {pk} does not exist")
        return Response(found)

    def _act(self, request: Request, pk: str, name: str, form: Any, step: str = "") -> Response:
        who = auth.actor(request)
        data = form(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        run_id = int(pk)
        if not Run.objects.filter(Q(pk=run_id) & who.where()).exists():
            raise exceptions.NotFound(f"run {run_id} does not exist")
        common = {"run_id": run_id, "actor": who, "reason": values["reason"]}
        step_name = values.get("step", "")
        try:
            if name == "approve":
                actions.step_approve(**common, step_name=step_name)
            elif name == "skip":
                actions.step_skip(**common, step_name=step_name)
            elif name == "retry":
                actions.run_retry(**common, step_name=step_name)
            elif name == "cancel":
                actions.run_cancel(**common)
            else:
                actions.run_release(**common)
        except actions.AlreadyDone as exc:
            return result(run_id, who, changed=False, detail=f"{exc}: nothing changed")
        except actions.ActionError as exc:
            raise problems.NotApplicable(str(exc)) from None
        at = f" step {step_name}" if step_name else ""
        return result(run_id, who, changed=True, detail=f"run {run_id}{at}: {name} recorded")

    _ACTED = {200: shapes.ActionResult, **errors(400, 401, 403, 404, 409, 429)}

    @extend_schema(request=inputs.StepReason, responses=_ACTED)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        """Approve a step waiting for a person (its run's operators)."""
        return self._act(request, pk, "approve", inputs.StepReason)

    @extend_schema(request=inputs.Retry, responses=_ACTED)
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str) -> Response:
        """Run failed or cancelled steps again (one, or all of them)."""
        return self._act(request, pk, "retry", inputs.Retry)

    @extend_schema(request=inputs.StepReason, responses=_ACTED)
    @action(detail=True, methods=["post"])
    def skip(self, request: Request, pk: str) -> Response:
        """Skip a step: its dependents go on as if it had succeeded."""
        return self._act(request, pk, "skip", inputs.StepReason)

    @extend_schema(request=inputs.Reason, responses=_ACTED)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """Stop a run (the lifecycle keeps holding unless released)."""
        return self._act(request, pk, "cancel", inputs.Reason)

    @extend_schema(request=inputs.Reason, responses=_ACTED)
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str) -> Response:
        """Let the held lifecycle proceed, whatever the run's state (its releasers)."""
        return self._act(request, pk, "release", inputs.Reason)

    @extend_schema(
        request=inputs.Bulk,
        responses={200: shapes.BulkResult, **errors(400, 401, 403, 429)},
        parameters=[OpenApiParameter("ordering", exclude=True)],
    )
    @action(detail=False, methods=["post"], filter_backends=[], pagination_class=None)
    def bulk(self, request: Request) -> Response:
        """Approve, retry, release or cancel many runs with one reason: those named, or
        every run the fleet's filter finds that the action applies to now. Each run is
        acted on (or refused) on its own, as the single action does."""
        who = auth.actor(request)
        data = inputs.Bulk(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        name = values["action"]
        if not who.may(access.ACTIONS[name]):
            raise exceptions.PermissionDenied(f"{who.name} may not {name} runs anywhere")
        if "ids" in values:
            ids = list(values["ids"])
        else:
            given = dict(values["filter"])
            view = fleet.BACKGROUND if given.pop("view", "held") == "background" else fleet.HELD
            chosen = fleet.FleetFilter(**given, view=view)
            try:
                runs = bulk.by_filter(name, chosen, actor=who, now=timezone.now())
                ids = list(runs.order_by("created_at", "pk").values_list("pk", flat=True))
            except fleet.FilterError as exc:
                raise exceptions.ValidationError({"filter": [str(exc)]}) from None
        try:
            outcomes = bulk.perform(name, ids, actor=who, reason=values["reason"])
        except actions.ActionError as exc:
            raise exceptions.ValidationError({"non_field_errors": [str(exc)]}) from None
        done = sum(o.ok for o in outcomes)
        return Response(
            {
                "action": name,
                "done": done,
                "refused": len(outcomes) - done,
                "outcomes": [
                    {
                        "run": o.run_id,
                        "cluster": o.cluster,
                        "ok": o.ok,
                        "changed": o.changed,
                        "message": o.message,
                    }
                    for o in outcomes
                ],
            }
        )
