"""The Clusters in test requests are shaped as Cluster API sends them: checked against CAPI's CRD.

Uses the Cluster CRD in ../shared/capi/ (taken unchanged from kubernetes-sigs/cluster-api);
skipped when that folder is not beside the checkout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support import capi
from tests.support.servers import ROOT

CRD = ROOT.parent / "shared" / "capi" / "cluster.x-k8s.io_clusters.yaml"


def _schema(version: str) -> dict[str, Any]:
    crd = yaml.safe_load(Path(CRD).read_text())
    schema: dict[str, Any] = next(v for v in crd["spec"]["versions"] if v["name"] == version)[
        "schema"
    ]["openAPIV3Schema"]
    # The API server fills metadata's schema; the CRD leaves it open.
    return schema


@pytest.mark.skipif(not CRD.exists(), reason="../shared/capi is not beside this checkout")
@pytest.mark.parametrize(
    ("version", "cluster"),
    [("v1beta2", capi.cluster_v1beta2()), ("v1beta1", capi.cluster_v1beta1())],
)
def test_the_test_clusters_validate_against_capis_crd(
    version: str, cluster: dict[str, Any]
) -> None:
    jsonschema.validate(cluster, _schema(version))


@pytest.mark.skipif(not CRD.exists(), reason="../shared/capi is not beside this checkout")
def test_the_crd_check_catches_a_misshapen_cluster() -> None:
    cluster = capi.cluster_v1beta2()
    cluster["spec"]["topology"]["classRef"] = "quick-start"  # v1beta2 wants an object
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(cluster, _schema("v1beta2"))
