"""schemathesis against the published OpenAPI document, over real HTTPS to gunicorn.

The document is loaded from the server's own /openapi.json (verified with the test CA).
For each of the ten operations, schemathesis generates schema-valid requests (positive)
and schema-violating ones (negative). Every answer must be free of 5xx, have a documented
status and content type, and conform to the response schema. schemathesis's
`negative_data_rejection` check (a 4xx for invalid data) does not apply: CAPI's contract
answers bad input with HTTP 200 and `status: Failure`, which the response schema covers.

schemathesis's pytest decorator (`schema.parametrize`) needs the schema at import time;
our server starts in a fixture, so the test uses the lower-level API instead:
`operation.as_strategy()` with hypothesis's `given`, and `case.validate_response`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
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

from tests.support import servers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
#: Per operation and mode; ten operations, two modes.
EXAMPLES = 25


@pytest.fixture
def session(hook_server: servers.HookServer) -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def _operations(
    schema: schemathesis.BaseSchema,
) -> list[schemathesis.APIOperation[Any, Any, Any, Any]]:
    results = list(schema.get_all_operations())
    errors = [r.err() for r in results if isinstance(r, Err)]
    assert not errors, f"schemathesis cannot use the document: {errors}"
    return [r.ok() for r in results if isinstance(r, Ok)]


def _base_url(server: servers.HookServer) -> str:
    return f"https://{server.host}:{server.port}"


def test_the_document_loads_and_has_the_ten_operations(hook_server: servers.HookServer) -> None:
    schema = schemathesis.openapi.from_url(
        f"{_base_url(hook_server)}/openapi.json", verify=str(hook_server.ca_file)
    )
    operations = _operations(schema)
    assert len(operations) == 10
    assert {op.method.upper() for op in operations} == {"POST"}


@pytest.mark.parametrize("mode", [schemathesis.GenerationMode.POSITIVE, "negative"])
def test_generated_requests_get_answers_that_conform_to_the_document(
    hook_server: servers.HookServer, session: requests.Session, mode: Any
) -> None:
    mode = schemathesis.GenerationMode(mode)
    base_url = _base_url(hook_server)
    schema = schemathesis.openapi.from_url(
        f"{base_url}/openapi.json", verify=str(hook_server.ca_file)
    )
    ca_file = str(hook_server.ca_file)
    log_before = len(hook_server.log())
    calls = 0
    for operation in _operations(schema):

        @settings(
            max_examples=EXAMPLES,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case: schemathesis.Case[Any]) -> None:
            nonlocal calls
            # schemathesis passes its own `verify` to requests: name the test CA here.
            response = case.call(base_url=base_url, session=session, verify=ca_file)
            calls += 1
            case.validate_response(response, checks=CHECKS)

        check()
    assert calls >= 10 * 5, "schemathesis generated too few requests to mean anything"
    new_log = hook_server.log()[log_before:]
    assert " ERROR " not in new_log and "Traceback" not in new_log, new_log[-2000:]
