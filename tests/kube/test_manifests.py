"""workflows.manifests against the API emulator: apply and delete of any kind."""

from __future__ import annotations

import pytest

from tests.kube.conftest import NS
from tests.support.kube import KubeEmulator
from workflows import k8s, manifests


def test_apply_creates_then_updates_any_kind_and_delete_removes_it(kube: KubeEmulator) -> None:
    api = k8s.management_api()
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "addon", "namespace": NS, "labels": {"app": "addon"}},
        "spec": {"replicas": 1},
    }
    created = manifests.apply(api, manifest)
    assert created["metadata"]["uid"]
    manifests.apply(api, {**manifest, "spec": {"replicas": 2}})
    stored = kube.get_object("apps", "v1", "deployments", NS, "addon")
    assert stored is not None
    assert stored["spec"] == {"replicas": 2}
    assert (
        "PATCH",
        f"/apis/apps/v1/namespaces/{NS}/deployments/addon?fieldManager=hooksvc&force=true",
    ) in kube.requests
    assert manifests.delete(api, manifest) is True
    assert manifests.delete(api, manifest) is False
    assert kube.get_object("apps", "v1", "deployments", NS, "addon") is None


def test_apply_of_a_cluster_scoped_kind_takes_no_namespace(kube: KubeEmulator) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "r"},
    }
    manifests.apply(k8s.management_api(), role, namespace=NS)
    assert kube.get_object("rbac.authorization.k8s.io", "v1", "clusterroles", None, "r") is not None


def test_apply_of_a_kind_nobody_serves_is_not_found() -> None:
    manifest = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    with pytest.raises(k8s.NotFound) as exc:
        manifests.apply(k8s.management_api(), manifest)
    assert exc.value.message == "example.com/v1: API server answered 404 Not Found"
