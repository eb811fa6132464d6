"""Body-size limits over real HTTPS: a chunked upload cannot slip past the 20 MiB cap.

The hook view reads at most Content-Length bytes, and only when it is declared and at
most 20 MiB (hooksvc/api.py); a chunked body has no Content-Length, so nothing of it is
buffered and the answer is a Failure. CAPI's runtime client always sends Content-Length.
"""

from __future__ import annotations

import json
import threading

import pytest

from tests.support import capi, servers
from workflows.models import HookCall

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_chunked_body_over_20_mib_is_answered_without_being_buffered(
    hook_server: servers.HookServer,
) -> None:
    conn = hook_server.connection()
    sent = 0

    def send_chunks() -> None:
        nonlocal sent
        chunk = b" " * (1 << 20)
        try:
            for _ in range(25):
                conn.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                sent += len(chunk)
            conn.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server may close the connection once it has answered

    try:
        conn.putrequest("POST", capi.hook_path("BeforeClusterCreate"))
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        sender = threading.Thread(target=send_chunks, daemon=True)
        sender.start()
        response = conn.getresponse()
        body = json.loads(response.read())
        sender.join(timeout=60)
    finally:
        conn.close()
    assert response.status == 200
    assert body["status"] == "Failure"
    assert body["message"].startswith("request body is not valid JSON"), body
    assert HookCall.objects.count() == 0
    assert "Traceback" not in hook_server.log()
