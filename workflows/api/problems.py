"""The REST API's errors as problem details (RFC 9457), each with a stable `code`.

One handler (DRF's EXCEPTION_HANDLER) turns every error into `application/problem+json`:
`type` (`urn:hooksvc:problem:<code>`), `title` (the same for every problem of a code),
`status`, `detail` (what happened here, in a sentence), `code`, `instance` (the path), and
for bad input `errors`, one per field. Scripts branch on `code`, never on the words. The
operator services' own refusals arrive here as what they mean: `access.Denied` is
`permission_denied` (403), an action that does not apply in the run's state is
`not_applicable` (409). An error nobody foresaw is logged and answered `server_error`
without its text; nothing half-done stays written (DRF rolls the request's transaction
back, and each service commits only when it succeeds).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, serializers, status, views
from rest_framework.response import Response

from workflows.operators import access

logger = logging.getLogger(__name__)

MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:hooksvc:problem:"

#: Every code the API answers with, its HTTP status and title.
CODES: Mapping[str, tuple[int, str]] = {
    "not_authenticated": (401, "Authentication needed"),
    "token_invalid": (401, "The token is not valid"),
    "token_expired": (401, "The token has expired"),
    "token_revoked": (401, "The token was revoked"),
    "permission_denied": (403, "Not allowed"),
    "csrf_failed": (403, "CSRF check failed"),
    "not_found": (404, "Not found"),
    "method_not_allowed": (405, "Method not allowed"),
    "not_acceptable": (406, "Not acceptable"),
    "unsupported_media_type": (415, "Unsupported media type"),
    "payload_too_large": (413, "Request body too large"),
    "parse_error": (400, "Malformed request"),
    "invalid": (400, "Invalid input"),
    "not_applicable": (409, "The action does not apply now"),
    "managed_elsewhere": (409, "Changed only where it comes from"),
    "throttled": (429, "Too many requests"),
    "server_error": (500, "Internal error"),
    "provider_unreachable": (503, "The identity provider could not be reached"),
}


class NotApplicable(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "the action does not apply to the run in its current state"
    default_code = "not_applicable"


class ManagedElsewhere(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "it is changed only where it comes from"
    default_code = "managed_elsewhere"


class Unavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "the identity provider could not be reached"
    default_code = "provider_unreachable"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "the request body is larger than the API reads"
    default_code = "payload_too_large"


class FieldProblem(serializers.Serializer):  # type: ignore[type-arg]
    field = serializers.CharField(help_text="the input field, dotted; `non_field_errors` for all")
    message = serializers.CharField()
    code = serializers.CharField()


#: RFC 9457 problem details, as every error of the API is answered (built as a class of
#: its own: `errors` is also a Serializer's attribute).
Problem = type(
    "Problem",
    (serializers.Serializer,),
    {
        "__doc__": "RFC 9457 problem details, as every error of the API is answered.",
        "type": serializers.CharField(help_text="urn:hooksvc:problem:<code>"),
        "title": serializers.CharField(),
        "status": serializers.IntegerField(),
        "detail": serializers.CharField(),
        "code": serializers.ChoiceField(choices=sorted(CODES)),
        "instance": serializers.CharField(),
        "errors": FieldProblem(many=True, required=False),
    },
)


def body(code: str, detail: str, instance: str) -> dict[str, Any]:
    status_code, title = CODES[code]
    return {
        "type": f"{TYPE_PREFIX}{code}",
        "title": title,
        "status": status_code,
        "detail": detail,
        "code": code,
        "instance": instance,
    }


def _errors(detail: Any, prefix: str = "") -> list[dict[str, str]]:
    """A ValidationError's detail (nested dicts and lists) as one problem per field."""
    if isinstance(detail, dict):
        found = []
        for key, value in detail.items():
            found += _errors(value, f"{prefix}.{key}" if prefix else str(key))
        return found
    if isinstance(detail, list):
        found = []
        for index, value in enumerate(detail):
            nested = isinstance(value, dict | list)
            found += _errors(value, f"{prefix}[{index}]" if nested else prefix)
        return found
    return [
        {
            "field": prefix or "non_field_errors",
            "message": str(detail),
            "code": str(getattr(detail, "code", "invalid")),
        }
    ]


def _code(exc: exceptions.APIException) -> str:
    if isinstance(exc, exceptions.ValidationError):
        return "invalid"
    codes = exc.get_codes()
    code = codes if isinstance(codes, str) else exc.default_code
    if code == "permission_denied" and str(exc.detail).startswith("CSRF Failed"):
        return "csrf_failed"
    if code == "authentication_failed":
        return "token_invalid"
    return str(code) if code in CODES else _by_status(exc.status_code)


def _by_status(status_code: int) -> str:
    return next((c for c, (s, _) in CODES.items() if s == status_code), "server_error")


def handler(exc: Exception, context: Mapping[str, Any]) -> Response:
    """DRF's EXCEPTION_HANDLER: every error as a problem."""
    request = context.get("request")
    instance = request.path if request is not None else ""
    if isinstance(exc, access.Denied):
        exc = exceptions.PermissionDenied(str(exc))
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge(
            f"the request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"
        )
    response = views.exception_handler(exc, dict(context))
    if response is None or not isinstance(exc, exceptions.APIException):
        # Not an API error: log it whole, answer without its text.
        logger.error("API request failed", exc_info=exc, extra={"path": instance})
        views.set_rollback()
        problem = body("server_error", "hooksvc could not answer; see its logs", instance)
        return Response(problem, status=500, content_type=MEDIA_TYPE)
    code = _code(exc)
    if isinstance(exc, exceptions.ValidationError):
        problem = body(code, "the request's input is not valid; see errors", instance)
        problem["errors"] = _errors(exc.detail)
    else:
        problem = body(code, str(exc.detail), instance)
    problem["status"] = response.status_code
    response.data = problem
    response.content_type = MEDIA_TYPE
    return response
