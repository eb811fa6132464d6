"""CAPI-shaped hook requests, with v1beta1 (older CAPI) and v1beta2 (current CAPI) Clusters."""

from __future__ import annotations

import copy
from typing import Any

API_VERSION = "hooks.runtime.cluster.x-k8s.io/v1alpha1"

_UPGRADE_PLAN = {
    "controlPlaneUpgrades": [
        {"version": "v1.31.0"},
        {"version": "v1.32.3"},
        {"version": "v1.33.0"},
    ],
    "workersUpgrades": [{"version": "v1.32.3"}, {"version": "v1.33.0"}],
}

#: The hook's own fields, as the lifecycle hooks documentation shows them.
HOOK_FIELDS: dict[str, dict[str, Any]] = {
    "BeforeClusterCreate": {},
    "AfterControlPlaneInitialized": {},
    "BeforeClusterUpgrade": {
        "fromKubernetesVersion": "v1.30.0",
        "toKubernetesVersion": "v1.33.0",
        **_UPGRADE_PLAN,
    },
    "BeforeControlPlaneUpgrade": {
        "fromKubernetesVersion": "v1.30.0",
        "toKubernetesVersion": "v1.31.0",
        **_UPGRADE_PLAN,
    },
    "AfterControlPlaneUpgrade": {"kubernetesVersion": "v1.31.0", **_UPGRADE_PLAN},
    "BeforeWorkersUpgrade": {
        "fromKubernetesVersion": "v1.30.0",
        "toKubernetesVersion": "v1.32.3",
        **_UPGRADE_PLAN,
    },
    "AfterWorkersUpgrade": {"kubernetesVersion": "v1.32.3", **_UPGRADE_PLAN},
    "AfterClusterUpgrade": {"kubernetesVersion": "v1.33.0"},
    "BeforeClusterDelete": {},
}


def cluster_v1beta2(
    name: str = "prod-eu-1",
    namespace: str = "fleet",
    *,
    uid: str = "6f0c2a4e-2d7b-4c61-9a1e-0f5c1d2e3a4b",
    labels: dict[str, str] | None = None,
    version: str = "v1.30.0",
    cluster_class: str = "quick-start",
) -> dict[str, Any]:
    """A Cluster as current CAPI sends it: no status, managedFields stripped."""
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "48211",
            "generation": 3,
            "creationTimestamp": "2026-11-01T09:00:00Z",
            "labels": {"env": "prod", **(labels or {})},
            "annotations": {"owner": "platform"},
            "finalizers": ["cluster.cluster.x-k8s.io"],
        },
        "spec": {
            "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
            "controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443},
            "controlPlaneRef": {
                "apiGroup": "controlplane.cluster.x-k8s.io",
                "kind": "KubeadmControlPlane",
                "name": f"{name}-cp",
            },
            "topology": {
                "classRef": {"name": cluster_class, "namespace": namespace},
                "version": version,
                "controlPlane": {"replicas": 3},
                "workers": {
                    "machineDeployments": [
                        {"class": "default-worker", "name": "md-0", "replicas": 2}
                    ]
                },
            },
        },
    }


def cluster_v1beta1(
    name: str = "legacy-1",
    namespace: str = "fleet",
    *,
    uid: str = "1a2b3c4d-0000-4000-8000-000000000001",
    labels: dict[str, str] | None = None,
    version: str = "v1.30.0",
    cluster_class: str = "quick-start",
) -> dict[str, Any]:
    """A Cluster as older CAPI (v1beta1 API) sends it."""
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Cluster",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "labels": {"env": "prod", **(labels or {})},
        },
        "spec": {
            "paused": False,
            "controlPlaneRef": {
                "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
                "kind": "KubeadmControlPlane",
                "name": f"{name}-cp",
                "namespace": namespace,
            },
            "topology": {
                "class": cluster_class,
                "version": version,
                "controlPlane": {"replicas": 1},
            },
        },
    }


def hook_request(
    hook: str,
    cluster: dict[str, Any] | None = None,
    *,
    settings: dict[str, str] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A `<hook>Request` body as CAPI's runtime client marshals it."""
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": f"{hook}Request",
        "cluster": copy.deepcopy(cluster if cluster is not None else cluster_v1beta2()),
        **copy.deepcopy(HOOK_FIELDS[hook]),
        **fields,
    }
    if settings:
        body["settings"] = settings
    return body


def hook_path(hook: str, handler: str | None = None, prefix: str = "") -> str:
    name = handler or "".join("-" + c.lower() if c.isupper() else c for c in hook).lstrip("-")
    return f"{prefix}/hooks.runtime.cluster.x-k8s.io/v1alpha1/{hook.lower()}/{name}"


DISCOVERY_PATH = "/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery"
