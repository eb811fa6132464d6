"""Serving options: a path prefix, handler overrides, and certificate rotation."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from hooksvc.serving import devcerts
from tests.support import capi, servers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_prefix_and_handler_overrides_shape_paths_and_discovery(
    tls_files: servers.TLSFiles, tmp_path: Path
) -> None:
    overrides = {
        "BeforeClusterUpgrade": {"name": "backup", "timeoutSeconds": 5, "failurePolicy": "Ignore"}
    }
    env = {"HOOKSVC_PATH_PREFIX": "/hooksvc", "HOOKSVC_HANDLERS": json.dumps(overrides)}
    with servers.hook_server(tls_files.server_dir, tmp_path / "log", extra_env=env) as server:
        _, body = server.post(
            "/hooksvc" + capi.DISCOVERY_PATH,
            {"apiVersion": capi.API_VERSION, "kind": "DiscoveryRequest"},
        )
        entry = next(
            h for h in body["handlers"] if h["requestHook"]["hook"] == "BeforeClusterUpgrade"
        )
        assert entry == {
            "name": "backup",
            "requestHook": {"apiVersion": capi.API_VERSION, "hook": "BeforeClusterUpgrade"},
            "timeoutSeconds": 5,
            "failurePolicy": "Ignore",
        }
        request = capi.hook_request("BeforeClusterUpgrade")
        assert (
            server.post(
                capi.hook_path("BeforeClusterUpgrade", "backup", prefix="/hooksvc") + "?timeout=5s",
                request,
            )[1]["status"]
            == "Success"
        )
        assert (
            server.post(capi.hook_path("BeforeClusterUpgrade", prefix="/hooksvc"), request)[0]
            == 404
        )
        assert server.post(capi.hook_path("BeforeClusterUpgrade", "backup"), request)[0] == 404


@pytest.mark.parametrize("timeout", [0, 31])
def test_invalid_handler_overrides_stop_the_server_at_boot(
    tls_files: servers.TLSFiles, tmp_path: Path, timeout: int
) -> None:
    """0 too: ExtensionConfig v1beta2 wants timeoutSeconds >= 1 (hooksvc.contract.handlers)."""
    env = {"HOOKSVC_HANDLERS": json.dumps({"BeforeClusterDelete": {"timeoutSeconds": timeout}})}
    with (
        pytest.raises(RuntimeError, match="exited"),
        servers.hook_server(
            tls_files.server_dir, tmp_path / "log", extra_env={**env, "HOOKSVC_WEB_WORKERS": "1"}
        ),
    ):
        pass
    assert (
        "HOOKSVC_HANDLERS.BeforeClusterDelete.timeoutSeconds must be an integer from 1 to 30"
        f" (ExtensionConfig v1beta2 requires at least 1), got {timeout}"
        in (tmp_path / "log").read_text()
    )


def test_a_rotated_certificate_is_served_without_a_restart(
    tls_files: servers.TLSFiles, tmp_path: Path
) -> None:
    tls_dir = tmp_path / "tls"
    shutil.copytree(tls_files.server_dir, tls_dir)
    with servers.hook_server(tls_dir, tmp_path / "log") as server:
        first = _served_certificate(server)
        ca_cert, ca_key = devcerts.make_ca("rotated CA")
        cert, key = devcerts.issue(ca_cert, ca_key, "localhost", hosts=devcerts.DEFAULT_HOSTS)
        devcerts.write_serving_files(tls_dir, ca_cert, cert, key)
        server.ca_file = tls_dir / "ca.crt"
        deadline = time.monotonic() + 10
        while _served_certificate(server) == first:
            assert time.monotonic() < deadline, "the rotated certificate was never served"
            time.sleep(0.2)
        assert _served_certificate(server) == cert.public_bytes(serialization.Encoding.DER)


def _served_certificate(server: servers.HookServer) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection((server.host, server.port), timeout=5) as sock,
        context.wrap_socket(sock) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der
