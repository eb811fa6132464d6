"""A provider that takes a connection and never answers fails the call, it does not hold it.

authlib's requests session bounds a request only by its `default_timeout` (authlib 1.x,
integrations/requests_client/oauth2_session.py, `OAuth2Session.request`: `if
self.default_timeout: kwargs.setdefault("timeout", ...)`); other client kwargs go to its
OAuth metadata. Without a bound, requests waits for ever (requests' docs: "nearly all
production code should use this parameter"), and so would every API call with a JWT, each
holding a web worker. Here the provider's discovery document never comes: the bearer is
refused as `provider_unreachable`, which the API answers 503.
"""

from __future__ import annotations

import concurrent.futures
import socket
from collections.abc import Iterator

import pytest
from django.test.utils import override_settings

from workflows.operators import bearer, oidc, tokens


@pytest.fixture
def silent_provider() -> Iterator[str]:
    """An address whose connections are accepted by the kernel (the backlog) and never read."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_provider_that_never_answers_refuses_the_token(
    silent_provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(oidc, "TIMEOUT_SECONDS", 0.5)
    settings = override_settings(OIDC_ISSUER=silent_provider, OIDC_CLIENT_ID="hooksvc")
    # On a thread, so that a call with no bound fails the test instead of hanging it.
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        with settings:
            call = pool.submit(bearer.claims_of, "e30.e30.c2ln")
            refused = call.exception(timeout=30)
    finally:
        pool.shutdown(wait=False)
    assert isinstance(refused, tokens.Refused), refused
    assert refused.code == "provider_unreachable"
    assert "ReadTimeout" in str(refused)
