"""How the REST API reads a body and describes itself to OPTIONS, without a 500 for any input.

Bodies are read by the hook path's own JSON rules (hooksvc.contract.wire.decode): one JSON
object, no duplicate keys, nesting at most wire.MAX_DEPTH levels, no integer longer than
Python reads. DRF's JSONParser turns a ValueError into a parse error but lets a RecursionError
(JSON nested thousands deep) through as a 500 (rest_framework/parsers.py JSONParser.parse).
A body larger than Django's DATA_UPLOAD_MAX_MEMORY_SIZE raises RequestDataTooBig when it is
read (django/http/request.py HttpRequest.body), and the parser here holds DRF's own reads to
the same cap; workflows.api.problems answers it 413.

OPTIONS: DRF's SimpleMetadata describes the writes of a view by building its serializer
(rest_framework/metadata.py determine_actions -> view.get_serializer()), which the action
endpoints do not declare (they validate with inputs.* themselves): an AssertionError, a 500.
The API describes itself in /api/v1/openapi.json; OPTIONS names the view and its media types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework import exceptions, metadata, parsers

from hooksvc.contract import wire

if TYPE_CHECKING:  # rest_framework.views imports the parsers: a cycle at run time
    from rest_framework.request import Request
    from rest_framework.views import APIView


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        # Django's own cap (RequestDataTooBig) applies to request.body, which DRF bypasses
        # when it reads the stream itself (rest_framework/request.py Request._load_stream).
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = b"" if stream is None else stream.read(-1 if limit is None else limit + 1)
        if limit is not None and len(raw) > limit:
            raise RequestDataTooBig(f"request body exceeds {limit} bytes")
        try:
            return wire.decode(raw)
        except wire.BadRequest as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None


class Metadata(metadata.SimpleMetadata):
    def determine_metadata(self, request: Request, view: APIView) -> dict[str, Any]:
        return {
            "name": view.get_view_name(),
            "description": view.get_view_description(),
            "renders": [renderer.media_type for renderer in view.renderer_classes],
            "parses": [parser.media_type for parser in view.parser_classes],
            "schema": "/api/v1/openapi.json",
        }
