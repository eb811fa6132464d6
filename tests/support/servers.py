"""Starting the real hook server (gunicorn over HTTPS) and talking to it, for tests."""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from hooksvc.serving import devcerts

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def metrics_dir() -> Path:
    """The multiprocess metrics directory the test web servers and worker share.

    As in `make run`: the worker's step metrics show up in the web's /metrics.
    """
    return Path(settings.DATA_DIR) / "prometheus-servers"


def test_database_url() -> str:
    """The pytest-django test database, for processes the tests start."""
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@dataclasses.dataclass(frozen=True)
class TLSFiles:
    """A CA, the server's files in cert-manager's layout, and client certificates."""

    server_dir: Path
    ca_file: Path
    client_cert: Path
    client_key: Path
    #: Signed by a CA the server does not trust.
    stranger_cert: Path
    stranger_key: Path


def make_tls_files(root: Path) -> TLSFiles:
    ca_cert, ca_key = devcerts.make_ca("hooksvc test CA")
    server_cert, server_key = devcerts.issue(
        ca_cert, ca_key, "localhost", hosts=devcerts.DEFAULT_HOSTS
    )
    devcerts.write_serving_files(root / "server", ca_cert, server_cert, server_key)
    client_cert, client_key = devcerts.issue(
        ca_cert, ca_key, "capi-controller-manager", client=True
    )
    other_ca, other_key = devcerts.make_ca("someone else's CA")
    stranger_cert, stranger_key = devcerts.issue(other_ca, other_key, "stranger", client=True)
    files = {
        "client.crt": devcerts.cert_pem(client_cert),
        "client.key": devcerts.key_pem(client_key),
        "stranger.crt": devcerts.cert_pem(stranger_cert),
        "stranger.key": devcerts.key_pem(stranger_key),
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
    return TLSFiles(
        server_dir=root / "server",
        ca_file=root / "server" / "ca.crt",
        client_cert=root / "client.crt",
        client_key=root / "client.key",
        stranger_cert=root / "stranger.crt",
        stranger_key=root / "stranger.key",
    )


@dataclasses.dataclass
class HookServer:
    host: str
    port: int
    ca_file: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    def client_context(self, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if cert and key:
            context.load_cert_chain(cert, key)
        return context

    def connection(self, context: ssl.SSLContext | None = None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self.host, self.port, context=context or self.client_context(), timeout=30
        )

    def post(
        self,
        path: str,
        body: bytes | Mapping[str, Any],
        *,
        context: ssl.SSLContext | None = None,
        method: str = "POST",
    ) -> tuple[int, dict[str, Any]]:
        """Send one request on a new connection; return the status and the decoded JSON body."""
        conn = self.connection(context)
        try:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            raw = response.read()
            if response.getheader("Content-Type", "").startswith("application/json"):
                return response.status, json.loads(raw)
            return response.status, {"non_json_body": raw.decode(errors="replace")}
        finally:
            conn.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def wait_for_port(
    host: str, port: int, process: subprocess.Popen[bytes], timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"server did not listen on {host}:{port} within {timeout} s")


def server_env(
    tls_dir: Path, port: int, extra_env: Mapping[str, str] | None = None
) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "hooksvc.settings",
        "DATABASE_URL": test_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "HOOKSVC_TLS_DIR": str(tls_dir),
        "HOOKSVC_BIND": f"127.0.0.1:{port}",
        "HOOKSVC_WEB_WORKERS": "1",
        "HOOKSVC_DATA_DIR": str(settings.DATA_DIR),
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir()),
        # Stop at SIGTERM without the drain (5 s by default, for a Service to drop the pod's
        # endpoint): it added 5 s to every server a test stops. test_web_drain sets its own.
        "HOOKSVC_WEB_DRAIN_SECONDS": "0",
        **(extra_env or {}),
    }


def start_gunicorn(env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """gunicorn with hooksvc's production configuration, in its own process group."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "python:hooksvc.serving.gunicorn_conf",
                "hooksvc.wsgi",
            ],
            cwd=ROOT,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_process(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def hook_server(
    tls_dir: Path, log_path: Path, *, extra_env: Mapping[str, str] | None = None
) -> Iterator[HookServer]:
    """Run gunicorn with hooksvc's production configuration against the test database."""
    port = free_port()
    process = start_gunicorn(server_env(tls_dir, port, extra_env), log_path)
    try:
        wait_for_port("127.0.0.1", port, process)
        yield HookServer("127.0.0.1", port, tls_dir / "ca.crt", process, log_path)
    finally:
        stop_process(process)
