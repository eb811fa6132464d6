"""Fixtures of the workflows.kube.k8s tests: the emulator as the management cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from tests.support.kube import KubeEmulator
from workflows.kube import k8s

#: The namespace the Clusters of these tests live in.
NS = "fleet"


@pytest.fixture(autouse=True)
def management(
    kube: KubeEmulator, kubeconfig_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """KUBECONFIG_PATH names the emulator's kubeconfig, and no client is left from before."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    k8s.forget_clients()
    with override_settings(KUBECONFIG_PATH=kubeconfig_path):
        yield kubeconfig_path
    k8s.forget_clients()
