"""Body-size limits over real HTTPS: a chunked upload cannot slip past the 20 MiB cap.

The hook view reads at most Content-Length bytes, and only when it is declared and at
most 20 MiB (hooksvc/serving/views.py); a chunked body has no Content-Length, so nothing of it is
buffered and the answer is a Failure. CAPI's runtime client always sends Content-Length.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

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


def _closed_by_server(sock: socket.socket, wait: float = 15) -> float:
    """Seconds until the server closed the connection; fails if it never does within `wait`."""
    sock.settimeout(wait)
    started = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the server kept a stalled connection open for {wait} s")
    return time.monotonic() - started


@pytest.mark.parametrize("stall", ["handshake", "body"])
def test_a_client_that_stalls_is_cut_off(
    tls_files: servers.TLSFiles, tmp_path: Path, stall: str
) -> None:
    # The stalls are cut by the head's bound, before a thread is given; the answer's own
    # bound stays above a worker's first request (Django's first-request work takes seconds
    # on a loaded machine).
    env = {"HOOKSVC_REQUEST_DEADLINE_SECONDS": "10", "HOOKSVC_REQUEST_HEAD_SECONDS": "2"}
    with servers.hook_server(tls_files.server_dir, tmp_path / "log", extra_env=env) as server:
        raw = socket.create_connection((server.host, server.port), timeout=15)
        with raw:
            if stall == "handshake":
                raw.sendall(b"\x16\x03\x01\x02\x00")  # the start of a ClientHello, then nothing
                _closed_by_server(raw)
            else:
                with server.client_context().wrap_socket(raw, server_hostname="localhost") as tls:
                    tls.sendall(
                        b"POST " + capi.hook_path("BeforeClusterCreate").encode() + b" HTTP/1.1\r\n"
                        b"Host: localhost\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 1000\r\n\r\n{"
                    )
                    _closed_by_server(tls)
        # The server still answers everyone else.
        assert (
            server.post(
                capi.DISCOVERY_PATH, {"apiVersion": capi.API_VERSION, "kind": "DiscoveryRequest"}
            )[0]
            == 200
        )
