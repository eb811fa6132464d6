"""schemathesis against the REST API's own OpenAPI document, over real HTTPS to gunicorn,
as an admin: for every operation, requests that follow the document (positive) and
requests that break it (negative). No answer may be a 5xx, and each must have a status and
content type the document lists for that operation and a body its schema allows.

Bounded: EXAMPLES requests per operation and mode (about 500 in all, well under a minute
alone). The server runs with a rate far above what the test sends, so answers are not
429s; the data (runs, a bypass, a template) is made first so that reads find something.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis

from tests.api.conftest import make_token, waiting_run
from tests.support import fuzz, servers
from tests.support import workflows as wf
from workflows.operators import bypasses

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EXAMPLES = 10
#: Headers the session sets for every request (the admin's token), never generated ones.
_OURS = ("authorization", "cookie")


@pytest.fixture(scope="module")
def api_server(
    tls_files: servers.TLSFiles,
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: Any,
    django_db_blocker: Any,
) -> Iterator[servers.HookServer]:
    log = tmp_path_factory.mktemp("logs") / "gunicorn-api.log"
    env = {"HOOKSVC_API_RATE": "100000/min", "HOOKSVC_WEB_WORKERS": "1"}
    with servers.hook_server(tls_files.server_dir, log, extra_env=env) as server:
        yield server


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_generated_requests_get_answers_that_conform_to_the_document(
    api_server: servers.HookServer, mode: str
) -> None:
    for namespace in ("team-a", "team-b"):
        waiting_run(namespace)
    wf.template("gate", steps=[{"name": "approve", "type": "approval"}])
    bypasses.bypass_open(
        hook="BeforeClusterUpgrade",
        duration=bypasses.parse_duration("1h"),
        actor="cli:setup",
        reason="drill",
    )
    secret = make_token(f"fuzz-{mode}", ["admin"])
    base_url = f"https://{api_server.host}:{api_server.port}"
    ca_file = str(api_server.ca_file)
    schema = schemathesis.openapi.from_url(f"{base_url}/api/v1/openapi.json", verify=ca_file)
    operations = fuzz.operations(schema)
    # Every operation of the checked-in document (tests/api/test_openapi.py: the same).
    document = json.loads((servers.ROOT / "docs" / "api-openapi.json").read_text())
    assert len(operations) == sum(len(item) for item in document["paths"].values())
    generation = schemathesis.GenerationMode(mode)
    log_before = len(api_server.log())
    with requests.Session() as session:
        session.headers["Authorization"] = f"Bearer {secret}"
        # The session's header, not a generated one: every request is the admin's.
        calls = fuzz.exercise(
            operations,
            base_url=base_url,
            session=session,
            ca_file=ca_file,
            mode=generation,
            examples=EXAMPLES,
            drop_headers=_OURS,
        )
    assert calls >= len(operations) * 3, "schemathesis generated too few requests to mean anything"
    new_log = api_server.log()[log_before:]
    assert "Traceback" not in new_log, new_log[-3000:]
