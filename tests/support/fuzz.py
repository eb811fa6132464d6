"""schemathesis over real HTTPS, for the hook endpoints' and the REST API's documents.

schemathesis's pytest decorator (`schema.parametrize`) needs the schema at import time; our
servers start in fixtures, so the tests use the lower-level API: `operation.as_strategy()`
with hypothesis's `given`, and `case.validate_response` with CHECKS.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err, Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

#: No 5xx; a status, content type and body the document lists for the operation.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def operations(
    schema: schemathesis.BaseSchema,
) -> list[schemathesis.APIOperation[Any, Any, Any, Any]]:
    """Every operation of `schema`; the test fails when schemathesis cannot use one."""
    results = list(schema.get_all_operations())
    errors = [r.err() for r in results if isinstance(r, Err)]
    assert not errors, f"schemathesis cannot use the document: {errors}"
    return [r.ok() for r in results if isinstance(r, Ok)]


def exercise(
    operations: list[schemathesis.APIOperation[Any, Any, Any, Any]],
    *,
    base_url: str,
    session: requests.Session,
    ca_file: str,
    mode: schemathesis.GenerationMode,
    examples: int,
    drop_headers: Collection[str] = (),
) -> int:
    """Send up to `examples` generated requests per operation and check each answer against
    CHECKS; return how many were sent. `drop_headers` (lower case) are the session's own:
    generated values of them are removed, so every request carries the session's."""
    calls = 0
    for operation in operations:

        @settings(
            max_examples=examples,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case: schemathesis.Case[Any]) -> None:
            nonlocal calls
            for name in [k for k in case.headers or {} if k.lower() in drop_headers]:
                del case.headers[name]
            # schemathesis passes its own `verify` to requests: name the test CA here.
            response = case.call(base_url=base_url, session=session, verify=ca_file)
            calls += 1
            case.validate_response(response, checks=CHECKS)

        check()
    return calls
