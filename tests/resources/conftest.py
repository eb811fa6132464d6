"""Fixtures of the resource tests: the emulator serving hooksvc's CRDs, and the controllers."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import override_settings

from tests.support.kube import KubeEmulator
from workflows.controllers import listwatch, resources
from workflows.definitions import crds, spec
from workflows.kube import k8s

KINDS = tuple(spec.PLURALS)
JSON = "application/json"


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(0.05)
    return found


def established(kube: KubeEmulator, name: str) -> bool:
    crd = kube.get_object("apiextensions.k8s.io", "v1", "customresourcedefinitions", None, name)
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture
def crd_kube(
    kube: KubeEmulator, kubeconfig_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KubeEmulator]:
    """hooksvc's management cluster, with the committed CRDs created and established.

    Created through the API, as `kubectl apply -k k8s/base/crds` does: the emulator's
    apiextensions controllers (tests/support/kube_crds.py) serve them once established.
    """
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    k8s.forget_clients()
    with override_settings(KUBECONFIG_PATH=kubeconfig_path):
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for file in sorted((Path(__file__).resolve().parents[2] / crds.DIRECTORY).glob("hooks.*")):
            crd = yaml.safe_load(file.read_text())
            k8s.request(k8s.management_api(), "POST", path, what="CRD", body=crd, content_type=JSON)
            name: str = crd["metadata"]["name"]
            wait_for(f"{name} established", functools.partial(established, kube, name))
        yield kube
    k8s.forget_clients()


class Running:
    """The resource controllers of both kinds, each in its thread, until `stop`."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.loops = {
            kind: resources.Resources(kind, stop=self.stop, timeout_seconds=1) for kind in KINDS
        }
        self.threads = [
            threading.Thread(target=loop.run, name=f"resources-{kind}", daemon=True)
            for kind, loop in self.loops.items()
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()
        wait_for(
            "the first list of each kind",
            lambda: all(loop.resource_version for loop in self.loops.values()),
        )

    def close(self, kube: KubeEmulator) -> None:
        self.stop.set()
        if not kube.running:
            kube.start()
        for thread in self.threads:
            thread.join(timeout=60)
            assert not thread.is_alive()


@pytest.fixture
def controllers(crd_kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    monkeypatch.setattr(listwatch, "BACKOFF_CAP_SECONDS", 0.5)
    monkeypatch.setattr(resources, "RESYNC_SECONDS", 1.0)
    running = Running()
    running.start()
    yield running
    running.close(crd_kube)
