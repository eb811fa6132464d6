"""The resources the Kubernetes API emulator serves from the start, and how it names them.

Built-ins of kube-apiserver, plus the CRD-defined kinds the steps use (CAPI Clusters, CSI
snapshots, Velero's Backups, BackupStorageLocations and PodVolumeBackups) declared as if
installed; a CRD created through the API adds its own (`kube_crds`).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Resource:
    """One served resource: group/version/plural, its kind, scope and status subresource."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status: bool = True
    #: The CustomResourceDefinition that serves it ("" for built-ins and declared ones).
    crd: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        # How kube-apiserver names a resource in messages: `secrets`, `clusters.cluster.x-k8s.io`.
        return f"{self.plural}.{self.group}" if self.group else self.plural


BUILTINS: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "Namespace", namespaced=False),
    Resource(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
    ),
    Resource("", "v1", "secrets", "Secret", namespaced=True, status=False),
    Resource("", "v1", "configmaps", "ConfigMap", namespaced=True, status=False),
    Resource("", "v1", "pods", "Pod", namespaced=True),
    Resource("", "v1", "services", "Service", namespaced=True),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True, status=False),
    Resource("", "v1", "events", "Event", namespaced=True, status=False),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", namespaced=True),
    Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False),
    Resource("", "v1", "nodes", "Node", namespaced=False),
    Resource("apps", "v1", "deployments", "Deployment", namespaced=True),
    Resource("apps", "v1", "statefulsets", "StatefulSet", namespaced=True),
    Resource("apps", "v1", "daemonsets", "DaemonSet", namespaced=True),
    Resource("batch", "v1", "jobs", "Job", namespaced=True),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True),
    *(
        Resource("rbac.authorization.k8s.io", "v1", plural, kind, namespaced, status=False)
        for plural, kind, namespaced in (
            ("clusterroles", "ClusterRole", False),
            ("clusterrolebindings", "ClusterRoleBinding", False),
            ("roles", "Role", True),
            ("rolebindings", "RoleBinding", True),
        )
    ),
    Resource("events.k8s.io", "v1", "events", "Event", namespaced=True, status=False),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True, status=False),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, status=False),
    Resource("cluster.x-k8s.io", "v1beta2", "clusters", "Cluster", namespaced=True),
    Resource("cluster.x-k8s.io", "v1beta1", "clusters", "Cluster", namespaced=True),
    Resource("snapshot.storage.k8s.io", "v1", "volumesnapshots", "VolumeSnapshot", True),
    Resource(
        "snapshot.storage.k8s.io", "v1", "volumesnapshotclasses", "VolumeSnapshotClass", False
    ),
    Resource(
        "snapshot.storage.k8s.io", "v1", "volumesnapshotcontents", "VolumeSnapshotContent", False
    ),
    # Velero's CRDs have no status subresource (velero config/crd/v1/bases): one patch
    # writes spec and status.
    *(
        Resource("velero.io", "v1", plural, kind, namespaced=True, status=False)
        for plural, kind in (
            ("backups", "Backup"),
            ("backupstoragelocations", "BackupStorageLocation"),
            ("podvolumebackups", "PodVolumeBackup"),
        )
    ),
)
