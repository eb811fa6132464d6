"""workflows.kube.manifests against the API emulator: apply and delete of any kind."""

from __future__ import annotations

import pytest

from tests.kube.conftest import NS
from tests.support.kube import KubeEmulator
from workflows import errors
from workflows.kube import k8s, manifests


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


def test_apply_of_a_kind_nobody_serves_is_not_served() -> None:
    manifest = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    with pytest.raises(k8s.NotServed) as exc:
        manifests.apply(k8s.management_api(), manifest)
    assert exc.value.message == "example.com/v1 is not served"
    other = {"apiVersion": "v1", "kind": "Widget", "metadata": {"name": "w"}}
    with pytest.raises(k8s.NotServed) as kind:
        manifests.apply(k8s.management_api(), other)
    assert kind.value.message == "v1 Widget is not served"


def test_errors_carry_the_status_reason_and_causes_but_messages_do_not(
    kube: KubeEmulator,
) -> None:
    """kube-apiserver's Status details.causes (e.g. NamespaceTerminating, from apiserver
    plugin/namespace/lifecycle/admission.go) let a caller tell a 403 that passes apart."""
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "old"}})
    held = {"name": "held", "namespace": "old", "finalizers": ["example.com/hold"]}
    kube.put_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": held})
    kube.delete("", "v1", "namespaces", None, "old")
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}}
    with pytest.raises(k8s.Forbidden) as exc:
        manifests.apply(k8s.management_api(), manifest, namespace="old")
    assert (exc.value.status, exc.value.reason) == (403, "Forbidden")
    assert exc.value.causes == ("NamespaceTerminating",)
    assert (
        exc.value.message
        == "apply /api/v1/namespaces/old/configmaps/new: API server answered 403 Forbidden"
    )


def test_a_conflict_on_apply_is_worth_another_attempt(kube: KubeEmulator) -> None:
    kube.fail_next("PATCH", "/configmaps/", 409)
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    with pytest.raises(k8s.TryAgain) as exc:
        manifests.apply(k8s.management_api(), manifest, namespace=NS)
    assert isinstance(exc.value, errors.TemporaryError)
    assert isinstance(exc.value.__cause__, k8s.Conflict)
