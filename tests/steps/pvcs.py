"""The workload cluster's volumes the `backup_pvs` tests back up (CSI and Velero alike)."""

from __future__ import annotations

from typing import Any

from tests.support.kube import KubeEmulator
from tests.support.kube_storage import snapshot_class, volume

FAST, SLOW = "fast.csi.example.com", "slow.csi.example.com"


def put(kube: KubeEmulator, *objects: dict[str, Any]) -> None:
    """Put the objects, and the Namespace of each PVC first."""
    for obj in objects:
        if obj["kind"] == "PersistentVolumeClaim":
            namespace = {"apiVersion": "v1", "kind": "Namespace"}
            kube.put_object({**namespace, "metadata": {"name": obj["metadata"]["namespace"]}})
        kube.put_object(obj)


def put_pvcs(kube: KubeEmulator) -> None:
    """shop/db on the fast driver, blog/content on the slow one (both chosen); blog/draft not
    bound and blog/legacy not CSI (chosen, skipped); shop/cache and other/data not chosen."""
    backup = {"backup": "yes"}
    put(kube, *volume("shop", "db", driver=FAST, size="10Gi", labels=backup))
    put(kube, *volume("shop", "cache", driver=FAST))
    put(kube, *volume("blog", "content", driver=SLOW, labels=backup))
    put(kube, *volume("blog", "draft", bound=False, labels=backup))
    put(kube, *volume("blog", "legacy", driver=None, labels=backup))
    put(kube, *volume("other", "data", driver=FAST, labels=backup))
    put(kube, snapshot_class("fast-delete", FAST, "Delete", default=True))
    put(kube, snapshot_class("fast-retain", FAST, "Retain"))
    put(kube, snapshot_class("slow-retain", SLOW, "Retain", default=True))
