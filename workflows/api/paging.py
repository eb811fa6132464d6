"""Pagination as DRF does it: `?limit=` and `?offset=`, with `count`, `next` and `previous`.

DRF's LimitOffsetPagination takes a limit it cannot read (`-5`, `ten`, `0`) for the default
and an offset it cannot read for 0, so a caller's mistake came back as a different page than
asked for; here either is a 400 naming the parameter and what it takes.
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework import exceptions, pagination
from rest_framework.request import Request
from rest_framework.views import APIView

#: An offset past this finds nothing anyway, and a larger one would not fit SQL's bigint.
MAX_OFFSET = 10**9


def _whole(request: Request, name: str, least: int, most: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    text = raw.strip()
    # ASCII digits only, and few enough that int() reads them (Python refuses 4,300+).
    if not re.fullmatch(r"[0-9]{1,12}", text) or not least <= int(text) <= most:
        raise exceptions.ValidationError(
            {name: [f"must be a whole number from {least} to {most}, got {raw[:40]!r}"]}
        )
    return int(text)


class Pages(pagination.LimitOffsetPagination):
    default_limit = 50
    max_limit = 500

    def get_limit(self, request: Request) -> int:
        found = _whole(request, self.limit_query_param, 1, self.max_limit)
        return self.default_limit if found is None else found

    def get_offset(self, request: Request) -> int:
        found = _whole(request, self.offset_query_param, 0, MAX_OFFSET)
        return 0 if found is None else found

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        """DRF's two parameters, with the bounds this class holds them to."""
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": self.max_limit},
            self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET},
        }
        parameters: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            schema = parameter.get("schema")
            if isinstance(schema, dict):
                schema.update(bounds.get(str(parameter.get("name")), {}))
        return parameters
