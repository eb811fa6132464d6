"""The `http` step against real sockets: redirects, and why a receiver did not answer.

Covers: a redirect (301, 302, 303, 307, 308) of the step's POST fails the step, naming
where it points, and nothing reaches that place (urllib would follow a 301-303 as a GET
without the body and send every header, credentials from `headersFromEnv` included, to
whatever host the redirect names: CPython Lib/urllib/request.py
HTTPRedirectHandler.redirect_request); a refused connection, a name that does not
resolve, a TLS failure (an untrusted CA, a certificate for another name, an expired one,
no TLS on the port), a receiver that never answers and one that hangs up each get their
own line in the operator's log, deterministic and without the exception's text or the URL's
credentials; the step's message (shown to readers of runs, copied into CAPI's conditions)
says only that the host did not answer, so the step is no port scanner. headersFromEnv sends
only the variables HOOKSVC_HTTP_ENV_ALLOWLIST names.
"""

from __future__ import annotations

import datetime
import http.server
import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from hooksvc.serving import devcerts
from tests.support.servers import free_port
from tests.workflows.conftest import Receiver
from workflows import errors
from workflows.steps import registry

SECRET = "sk-live-redirected-to-nowhere"


def no_answer(caplog: pytest.LogCaptureFixture, url: str, **params: Any) -> str:
    """What the operator's log says of a call to `url` that got no answer; the step's own
    message says no more than that."""
    caplog.set_level(logging.WARNING, logger="workflows.steps.http")
    with pytest.raises(errors.TemporaryError) as raised:
        call(url, **params)
    host = url.split("/")[2]
    assert raised.value.message == f"{host} did not answer (the worker's log says why)"
    (record,) = [r for r in caplog.records if r.name == "workflows.steps.http"]
    return record.getMessage().removeprefix("http step notify of run 3: ")


def call(url: str, **params: Any) -> registry.Outcome:
    ctx = registry.StepContext(
        run_id=3,
        step_name="notify",
        step_type="http",
        params=registry.validate("http", {"url": url, **params}, hook="BeforeClusterUpgrade"),
        run_context={},
        memo={},
        attempt=1,
    )
    return registry.get("http").run(ctx)


class Redirecting(http.server.BaseHTTPRequestHandler):
    code = 302
    location = ""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(self.code)
        self.send_header("Location", self.location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[http.server.HTTPServer] = []

    def start(handler: type[http.server.BaseHTTPRequestHandler]) -> int:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return int(server.server_address[1])

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


class Recording(http.server.BaseHTTPRequestHandler):
    """Records every request, whatever its method (a followed redirect arrives as a GET)."""

    seen: list[tuple[str, dict[str, str]]] = []

    def _record(self) -> None:
        self.seen.append((self.command, dict(self.headers)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _record

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_fails_the_step_naming_it_and_sends_nothing_there(
    serve: Any, monkeypatch: pytest.MonkeyPatch, settings: Any, code: int
) -> None:
    monkeypatch.setenv("HOOKSVC_TEST_API_KEY", SECRET)
    settings.HTTP_ENV_ALLOWLIST = frozenset({"HOOKSVC_TEST_API_KEY"})
    recorder: type[Recording] = type("Recorder", (Recording,), {"seen": []})
    target = serve(recorder)
    elsewhere = f"http://localhost:{target}/collect?sig=abc"
    port = serve(type("Handler", (Redirecting,), {"code": code, "location": elsewhere}))
    with pytest.raises(errors.PermanentError) as raised:
        call(f"http://127.0.0.1:{port}/hook", headersFromEnv={"X-Api-Key": "HOOKSVC_TEST_API_KEY"})
    assert raised.value.message == (
        f"127.0.0.1:{port} answered HTTP {code}, a redirect to"
        f" http://localhost:{target}/collect: redirects are not followed"
        " (they would send the request elsewhere); set url to where it points"
    )
    assert recorder.seen == [], "the redirect's target got a request (and the API key)"


def test_a_refused_connection_says_so(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    logged = no_answer(caplog, f"http://127.0.0.1:{port}/x")
    assert logged == f"127.0.0.1:{port} refused the connection"


def test_credentials_in_the_url_are_refused_when_the_template_is_applied() -> None:
    """urllib never sends them: http.client takes `user:pw@host` for the host name
    (CPython Lib/urllib/request.py Request.full_url, `_splithost`; http/client.py
    HTTPConnection._get_hostport), so such a step could only fail on a DNS lookup."""
    with pytest.raises(registry.ParamError) as raised:
        registry.validate("http", {"url": "https://ci:hunter2@hooks.example/x"}, hook="")
    assert "hunter2" not in str(raised.value)
    assert str(raised.value).endswith(
        "must not carry credentials (user:password@); put them in headersFromEnv"
    )


def test_a_name_that_does_not_resolve_says_so(caplog: pytest.LogCaptureFixture) -> None:
    # .invalid never resolves (RFC 2606).
    logged = no_answer(caplog, "https://receiver.hooksvc.invalid/x")
    assert logged == "the name receiver.hooksvc.invalid did not resolve (DNS)"


def test_a_receiver_that_never_answers_times_out_with_the_steps_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)  # connections queue; nobody reads or answers
        port = listening.getsockname()[1]
        logged = no_answer(caplog, f"http://127.0.0.1:{port}/x", timeoutSeconds=1)
    assert logged == f"127.0.0.1:{port} did not answer within 1 s"


def test_a_receiver_that_hangs_up_says_so(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    class HangUp(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.close_connection = True  # no status line: the client sees the close

    port = serve(HangUp)
    logged = no_answer(caplog, f"http://127.0.0.1:{port}/x")
    assert logged == f"127.0.0.1:{port} closed the connection without answering"


def expired(cert: x509.Certificate, ca_key: Any, key: Any) -> x509.Certificate:
    """`cert` again, valid from ten days ago to yesterday."""
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(cert.subject)
        .issuer_name(cert.issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=10))
        .not_valid_after(now - datetime.timedelta(days=1))
    )
    for extension in cert.extensions:
        builder = builder.add_extension(extension.value, critical=extension.critical)
    return builder.sign(ca_key, hashes.SHA256())


@pytest.fixture
def tls(tmp_path: Path, serve: Any) -> Any:
    """An HTTPS receiver with a certificate from a CA of the test's (trusted when asked)."""
    ca, ca_key = devcerts.make_ca("http step test CA")
    (tmp_path / "ca.crt").write_bytes(devcerts.cert_pem(ca))

    def start(hosts: tuple[str, ...], days: int = 30) -> int:
        cert, key = devcerts.issue(ca, ca_key, hosts[0], hosts=hosts)
        if days < 0:
            cert = expired(cert, ca_key, key)
        (tmp_path / "tls.crt").write_bytes(devcerts.cert_pem(cert))
        (tmp_path / "tls.key").write_bytes(devcerts.key_pem(key))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")

        class Ok(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        tls.servers.append(server)  # type: ignore[attr-defined]
        return int(server.server_address[1])

    tls.servers = []  # type: ignore[attr-defined]
    start.ca = tmp_path / "ca.crt"  # type: ignore[attr-defined]
    yield start
    for server in tls.servers:  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("trusted", "hosts", "days", "why"),
    [
        (False, ("127.0.0.1",), 30, "its certificate is not signed by a trusted CA"),
        (True, ("receiver.example",), 30, "its certificate is not for 127.0.0.1"),
        (True, ("127.0.0.1",), -1, "its certificate has expired"),
    ],
    ids=["untrusted CA", "another name", "expired"],
)
def test_a_tls_failure_says_what_is_wrong_with_the_certificate(  # noqa: PLR0917
    tls: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    trusted: bool,
    hosts: tuple[str, ...],
    days: int,
    why: str,
) -> None:
    if trusted:
        monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca))
    port = tls(hosts, days)
    logged = no_answer(caplog, f"https://127.0.0.1:{port}/x")
    assert logged == f"TLS with 127.0.0.1:{port} failed: {why}"


def test_a_trusted_certificate_for_the_right_name_is_answered(
    tls: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The TLS cases above fail for their reason, not for the test's TLS server."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca))
    port = tls(("127.0.0.1",))
    assert call(f"https://127.0.0.1:{port}/x") == registry.Done({"status": 204})


def test_https_to_a_port_that_speaks_plain_http_says_so(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    port = receiver.server_address[1]
    logged = no_answer(caplog, f"https://127.0.0.1:{port}/hook")
    assert logged == f"TLS with 127.0.0.1:{port} failed (does it serve HTTPS on that port?)"
