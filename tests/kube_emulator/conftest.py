"""Clients of the emulator tests: the official client, through an ordinary kubeconfig."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import urllib3

from tests.support.kube import eventually

__all__ = ["Api", "eventually"]

# The client's methods are typed for its models but take plain dicts too, which keeps these
# tests close to the wire; so the APIs and the watch are held as Any here.
Api = Any


@pytest.fixture
def api(kubeconfig_path: Path) -> Iterator[Api]:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig_path), client_configuration=configuration
    )
    # urllib3 would otherwise retry a 429 after its Retry-After by itself, hiding it.
    configuration.retries = urllib3.Retry(0, respect_retry_after_header=False)
    with kubernetes.client.ApiClient(configuration) as client:
        yield client


@pytest.fixture
def core(api: Api) -> Api:
    return kubernetes.client.CoreV1Api(api)


@pytest.fixture
def batch(api: Api) -> Api:
    return kubernetes.client.BatchV1Api(api)


@pytest.fixture
def custom(api: Api) -> Api:
    return kubernetes.client.CustomObjectsApi(api)
