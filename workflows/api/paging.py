"""Pagination as DRF does it: `?limit=` and `?offset=`, with `count`, `next` and `previous`."""

from __future__ import annotations

from rest_framework import pagination
from rest_framework.request import Request

#: An offset past this finds nothing anyway, and a larger one would not fit SQL's bigint.
MAX_OFFSET = 10**9


class Pages(pagination.LimitOffsetPagination):
    default_limit = 50
    max_limit = 500

    def get_offset(self, request: Request) -> int:
        return min(super().get_offset(request), MAX_OFFSET)
