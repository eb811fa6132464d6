"""Fixtures of the deployment tests: the rendered overlays (skipped only without kubectl)."""

from __future__ import annotations

import pytest

from tests.deploy import manifests


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[manifests.Obj]]:
    """Every target of manifests.TARGETS, rendered once per session."""
    if manifests.kubectl() is None:
        pytest.skip(
            "kubectl is not installed, so k8s/ cannot be rendered: install kubectl "
            "(README, 'Deploy on Kubernetes') to run these tests"
        )
    return {name: manifests.render(path) for name, path in manifests.TARGETS.items()}
