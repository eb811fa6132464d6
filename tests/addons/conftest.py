"""Fixtures of the add-on tests: the emulator as management and workload cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from tests.addons.profiles import NAMESPACE
from tests.steps.conftest import NS, put_kubeconfig_secret
from tests.support.kube import KubeEmulator
from workflows.kube import k8s


@pytest.fixture
def clusters(
    kube: KubeEmulator, kubeconfig_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KubeEmulator]:
    """The workload cluster `fleet/prod-eu-1` is the emulator itself, as in tests/steps."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for ns in (NS, NAMESPACE):
        kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    put_kubeconfig_secret(kube)
    k8s.forget_clients()
    with override_settings(KUBECONFIG_PATH=kubeconfig_path):
        yield kube
    k8s.forget_clients()
