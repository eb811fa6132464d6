"""Shared fixtures: TLS material and the real HTTPS hook server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest

from tests.support import servers


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> servers.TLSFiles:
    return servers.make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def hook_server(
    tls_files: servers.TLSFiles,
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: Any,
    django_db_blocker: Any,
) -> Iterator[servers.HookServer]:
    """gunicorn with the production configuration, serving the test database over HTTPS."""
    log = tmp_path_factory.mktemp("logs") / "gunicorn.log"
    with servers.hook_server(tls_files.server_dir, log) as server:
        yield server


@pytest.fixture(scope="session")
def mtls_server(
    tls_files: servers.TLSFiles,
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: Any,
    django_db_blocker: Any,
) -> Iterator[servers.HookServer]:
    """The hook server requiring client certificates signed by its ca.crt."""
    log = tmp_path_factory.mktemp("logs") / "gunicorn-mtls.log"
    with servers.hook_server(
        tls_files.server_dir, log, extra_env={"HOOKSVC_TLS_CLIENT_AUTH": "1"}
    ) as server:
        yield server


@pytest.fixture
def output_dir(request: pytest.FixtureRequest) -> Path:
    """A directory under test-output/ for files a test keeps (screenshots, logs)."""
    path: Path = servers.ROOT / "test-output" / request.node.name
    path.mkdir(parents=True, exist_ok=True)
    return path


# Property-based tests: deterministic in CI (derandomize), no per-example deadline on a
# shared 2-core machine, and no example database written into the work tree.
hypothesis.settings.register_profile(
    "hooksvc",
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
)
hypothesis.settings.load_profile("hooksvc")
