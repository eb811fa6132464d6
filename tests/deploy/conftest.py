"""Fixtures of the deployment tests: the rendered overlays and the chart (skipped only
without kubectl).

`rendered` holds what installs the whole of hooksvc as k8s/base does, object for object: the
overlays, and the chart with ci/prod-values.yaml. `every_rendering` adds each of the chart's
value sets and clusterctl's components with their defaults, for the checks that hold
whatever the options (restricted pods, requests and limits, no RBAC wildcard, schemas).
"""

from __future__ import annotations

import pytest

from tests.deploy import chart, clusterctl, manifests

#: The image the clusterctl components are installed with (their one required variable).
CLUSTERCTL_GIVEN = {"HOOKSVC_IMAGE_REPOSITORY": "registry.example.com/hooksvc"}


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[manifests.Obj]]:
    """Every target of manifests.TARGETS and the chart as prod, rendered once per session."""
    if manifests.kubectl() is None:
        pytest.skip(
            "kubectl is not installed, so k8s/ cannot be rendered: install kubectl "
            "(docs/deploy.md) to run these tests"
        )
    out = {name: manifests.render(path) for name, path in manifests.TARGETS.items()}
    out["chart:prod"] = chart.render(chart.VALUE_SETS["prod"])
    return out


@pytest.fixture(scope="session")
def every_rendering(
    rendered: dict[str, list[manifests.Obj]],
) -> dict[str, list[manifests.Obj]]:
    out = dict(rendered)
    for name, values in chart.VALUE_SETS.items():
        out[f"chart:{name}"] = chart.render(values)
    out["clusterctl"] = clusterctl.install(clusterctl.components_text(), CLUSTERCTL_GIVEN)
    return out
