"""Probes and the optional admin port: what Kubernetes and a NetworkPolicy rely on."""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest

from tests.support import capi, servers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _get(server: servers.HookServer, path: str, port: int | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection(
        server.host, port or server.port, context=server.client_context(), timeout=10
    )
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_healthz_and_readyz_answer_ok_when_everything_is_up(
    hook_server: servers.HookServer,
) -> None:
    assert _get(hook_server, "/healthz") == (200, b'{"status": "ok"}')
    assert _get(hook_server, "/readyz") == (200, b'{"status": "ok"}')


@pytest.mark.parametrize("down", ["DATABASE_URL", "CELERY_BROKER_URL"])
def test_readyz_fails_without_saying_why_when_a_dependency_is_down(
    tls_files: servers.TLSFiles, tmp_path: Path, down: str
) -> None:
    scheme = "postgres://postgres@" if down == "DATABASE_URL" else "redis://"
    env = {down: f"{scheme}127.0.0.1:{servers.free_port()}/0"}
    with servers.hook_server(tls_files.server_dir, tmp_path / "log", extra_env=env) as server:
        assert _get(server, "/healthz") == (200, b'{"status": "ok"}')
        assert _get(server, "/readyz") == (503, b'{"status": "unavailable"}')
        log = server.log()
    assert "readiness:" in log and "unavailable" in log


def test_an_admin_port_separates_the_admin_from_the_hooks(
    tls_files: servers.TLSFiles, tmp_path: Path
) -> None:
    admin_port = servers.free_port()
    env = {"HOOKSVC_ADMIN_PORT": str(admin_port)}
    with servers.hook_server(tls_files.server_dir, tmp_path / "log", extra_env=env) as server:
        assert _get(server, "/admin/login/")[0] == 404
        assert _get(server, "/admin/login/", admin_port)[0] == 200
        assert (
            server.post(
                capi.DISCOVERY_PATH, {"apiVersion": capi.API_VERSION, "kind": "DiscoveryRequest"}
            )[0]
            == 200
        )
        admin_side = servers.HookServer(
            server.host, admin_port, server.ca_file, server.process, server.log_path
        )
        assert (
            admin_side.post(
                capi.DISCOVERY_PATH, {"apiVersion": capi.API_VERSION, "kind": "DiscoveryRequest"}
            )[0]
            == 404
        )
        assert _get(server, "/healthz", admin_port)[0] == 200


def test_the_server_serves_the_admins_css_itself(hook_server: servers.HookServer) -> None:
    status, body = _get(hook_server, "/static/admin/css/base.css")
    assert status == 200, "the admin would be unstyled: is WhiteNoise in MIDDLEWARE?"
    assert b"--body-bg" in body
