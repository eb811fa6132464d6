"""Templates and add-on profiles: read them all; create, replace and delete the ones hooksvc
owns (made with apply_workflows, the admin or this API), with the permission to edit.

A write takes the document `apply_workflows` reads, as JSON, and goes through
workflows.operators.definitions (the same validation and writers as the admin and the
CLI). One kept in sync with a Kubernetes resource, or generated from a profile, changes
only there: `managed_elsewhere` (409).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model, QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from workflows.api import auth, inputs, problems, runs, shapes
from workflows.definitions import apply, spec
from workflows.models import AddonProfile, WorkflowTemplate
from workflows.operators import definitions

#: A template's or profile's name (a DNS-1123 label).
NAME = "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"


class _Definitions(viewsets.GenericViewSet):  # type: ignore[type-arg]
    model: type[Model]
    kind = ""
    lookup_field = "name"
    lookup_value_regex = NAME

    def get_queryset(self) -> QuerySet[Any]:
        return self.model._default_manager.order_by("name")

    def _one(self, name: str) -> Any:
        found = self.get_queryset().filter(name=name).first()
        if found is None:
            raise exceptions.NotFound(f"no {self.kind} {name!r}")
        return found

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([definitions.summary(d) for d in page or []])

    def retrieve(self, request: Request, name: str) -> Response:
        return Response(definitions.summary(self._one(name)))

    def _write(self, request: Request, name: str, put: Any) -> Response:
        form = inputs.Document(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            written = put(name=name, data=dict(request.data), actor=auth.actor(request))
        except spec.SpecError as exc:
            raise exceptions.ValidationError({"document": exc.messages}) from None
        except apply.SourceConflict as exc:
            raise problems.ManagedElsewhere(str(exc)) from None
        body = {
            "outcome": written.outcome.value,
            "generated": written.generated,
            "definition": definitions.summary(self._one(name)),
        }
        return Response(body, status=201 if written.outcome == apply.Outcome.CREATED else 200)

    def _delete(self, request: Request, name: str, delete: Any) -> Response:
        try:
            delete(name=name, actor=auth.actor(request))
        except self.model.DoesNotExist:  # type: ignore[attr-defined]
            raise exceptions.NotFound(f"no {self.kind} {name!r}") from None
        except apply.SourceConflict as exc:
            raise problems.ManagedElsewhere(str(exc)) from None
        except spec.SpecError as exc:
            raise problems.NotApplicable("; ".join(exc.messages)) from None
        return Response(status=204)


_READ = {200: shapes.Definition, **runs.errors(401, 403, 404, 429)}
_LIST = {200: shapes.Definition(many=True), **runs.errors(400, 401, 403, 429)}
_WRITTEN = {
    200: shapes.DefinitionWritten,
    201: shapes.DefinitionWritten,
    # 404: a name that is none (the path's pattern is a DNS-1123 label).
    **runs.errors(400, 401, 403, 404, 409, 429),
}
_DELETED = {204: None, **runs.errors(401, 403, 404, 409, 429)}


class TemplateViewSet(_Definitions):
    model = WorkflowTemplate
    kind = "WorkflowTemplate"

    @extend_schema(responses=_LIST)
    def list(self, request: Request) -> Response:
        """Every WorkflowTemplate, by name, with where it comes from."""
        return super().list(request)

    @extend_schema(responses=_READ)
    def retrieve(self, request: Request, name: str) -> Response:
        return super().retrieve(request, name)

    @extend_schema(request=inputs.Document, responses=_WRITTEN)
    def update(self, request: Request, name: str) -> Response:
        """Create or replace a template from its document; only new runs see the change."""
        return self._write(request, name, definitions.template_put)

    @extend_schema(responses=_DELETED)
    def destroy(self, request: Request, name: str) -> Response:
        """Delete a template; its runs keep the snapshot they started with."""
        return self._delete(request, name, definitions.template_delete)


class ProfileViewSet(_Definitions):
    model = AddonProfile
    kind = "AddonProfile"

    @extend_schema(responses=_LIST)
    def list(self, request: Request) -> Response:
        """Every AddonProfile, by name, with where it comes from."""
        return super().list(request)

    @extend_schema(responses=_READ)
    def retrieve(self, request: Request, name: str) -> Response:
        return super().retrieve(request, name)

    @extend_schema(request=inputs.Document, responses=_WRITTEN)
    def update(self, request: Request, name: str) -> Response:
        """Create or replace a profile; its templates are generated again."""
        return self._write(request, name, definitions.profile_put)

    @extend_schema(responses=_DELETED)
    def destroy(self, request: Request, name: str) -> Response:
        """Delete a profile and the templates generated from it."""
        return self._delete(request, name, definitions.profile_delete)
