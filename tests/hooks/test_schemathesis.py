"""schemathesis against the published OpenAPI document, over real HTTPS to gunicorn.

The document is loaded from the server's own /openapi.json (verified with the test CA).
For each of the ten operations, schemathesis generates schema-valid requests (positive)
and schema-violating ones (negative). Every answer must be free of 5xx, have a documented
status and content type, and conform to the response schema. schemathesis's
`negative_data_rejection` check (a 4xx for invalid data) does not apply: CAPI's contract
answers bad input with HTTP 200 and `status: Failure`, which the response schema covers.
tests/support/fuzz.py sends and checks the requests.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis

from tests.support import fuzz, servers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: Per operation and mode; ten operations, two modes.
EXAMPLES = 25


@pytest.fixture
def session(hook_server: servers.HookServer) -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def _base_url(server: servers.HookServer) -> str:
    return f"https://{server.host}:{server.port}"


def test_the_document_loads_and_has_the_ten_operations(hook_server: servers.HookServer) -> None:
    schema = schemathesis.openapi.from_url(
        f"{_base_url(hook_server)}/openapi.json", verify=str(hook_server.ca_file)
    )
    operations = fuzz.operations(schema)
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
    calls = fuzz.exercise(
        fuzz.operations(schema),
        base_url=base_url,
        session=session,
        ca_file=ca_file,
        mode=mode,
        examples=EXAMPLES,
    )
    assert calls >= 10 * 5, "schemathesis generated too few requests to mean anything"
    new_log = hook_server.log()[log_before:]
    assert " ERROR " not in new_log and "Traceback" not in new_log, new_log[-2000:]
