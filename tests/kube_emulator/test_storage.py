"""The emulator's CSI snapshot controllers (`kube_storage.SnapshotController`).

Sources in kubernetes-csi/external-snapshotter: client/apis/volumesnapshot/v1/types.go,
pkg/common-controller/snapshot_controller.go, pkg/sidecar-controller/snapshot_controller.go.
"""

from __future__ import annotations

from typing import Any

from tests.support.kube import KubeEmulator, eventually
from tests.support.kube_storage import SnapshotController, snapshot_class, volume

SNAP = ("snapshot.storage.k8s.io", "v1", "volumesnapshots")
CONTENTS = ("snapshot.storage.k8s.io", "v1", "volumesnapshotcontents")


def put(kube: KubeEmulator, *objects: dict[str, Any]) -> None:
    for obj in objects:
        kube.put_object(obj)


def snapshot(kube: KubeEmulator, name: str, pvc: str, class_name: str | None = None) -> None:
    spec: dict[str, Any] = {"source": {"persistentVolumeClaimName": pvc}}
    if class_name:
        spec["volumeSnapshotClassName"] = class_name
    put(kube, {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
               "metadata": {"name": name, "namespace": "default"}, "spec": spec})  # fmt: skip


def status(kube: KubeEmulator, name: str) -> dict[str, Any]:
    found = kube.get_object(*SNAP, "default", name) or {}
    return dict(found.get("status") or {})


def test_an_error_is_reported_then_cleared_when_a_retry_succeeds(kube: KubeEmulator) -> None:
    """sidecar-controller/snapshot_controller.go: createSnapshot's error ("Failed to create
    snapshot: failed to take snapshot of the volume ...") on the content, then
    checkandUpdateContentStatus's on each retry; the common controller copies it to the
    snapshot (updateSnapshotStatus), and both clear it when readyToUse turns true."""
    kube.add_controller(SnapshotController(failures=2, retry_seconds=0.2))
    put(kube, *volume("default", "data", size="2Gi"))
    put(kube, snapshot_class("fast", "csi.example.com", "Retain", default=True))
    snapshot(kube, "snap", "data")
    eventually("the error", lambda: "error" in status(kube, "snap"))
    first = status(kube, "snap")
    assert first["readyToUse"] is False
    assert first["error"]["message"] == (
        'Failed to create snapshot: failed to take snapshot of the volume vol-default-data: "'
        'rpc error: code = Internal desc = snapshot quota exceeded"'
    )
    eventually(
        "the retry's error",
        lambda: status(kube, "snap")["error"]["message"].startswith(
            "Failed to check and update snapshot content: failed to take snapshot"
        ),
    )
    eventually("ready", lambda: status(kube, "snap").get("readyToUse") is True)
    ready = status(kube, "snap")
    assert "error" not in ready
    assert ready["restoreSize"] == "2Gi"
    content = kube.get_object(*CONTENTS, None, ready["boundVolumeSnapshotContentName"]) or {}
    assert content["spec"]["driver"] == "csi.example.com"
    assert content["spec"]["volumeSnapshotClassName"] == "fast", "the driver's default class"
    assert content["spec"]["deletionPolicy"] == "Retain"
    assert content["status"]["snapshotHandle"].startswith("snap-")
    assert content["status"]["restoreSize"] == 2 * 2**30
    stored = kube.get_object(*SNAP, "default", "snap") or {}
    assert stored["spec"]["volumeSnapshotClassName"] == "fast"
    assert stored["metadata"]["finalizers"] == [
        "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
    ]


def test_what_cannot_be_snapshotted_is_reported_in_the_snapshot_error(
    kube: KubeEmulator,
) -> None:
    """snapshot_controller.go: getVolumeFromVolumeSnapshot (a PVC not bound),
    pvDriverFromSnapshot (a volume not CSI), SetDefaultSnapshotClass (no default class)."""
    kube.add_controller(SnapshotController())
    put(kube, *volume("default", "pending", bound=False))
    put(kube, *volume("default", "local", driver=None))
    put(kube, *volume("default", "orphan", driver="csi.other.io"))
    for name in ("pending", "local", "orphan"):
        snapshot(kube, name, name)
    expected = {
        "pending": "the PVC pending is not yet bound to a PV, will not attempt to take a snapshot",
        "local": "snapshotting non-CSI volumes is not supported, snapshot:default/local",
        "orphan": "cannot find default snapshot class",
    }
    for name, text in expected.items():
        eventually(name, lambda name=name: "error" in status(kube, name))  # type: ignore[misc]
        assert status(kube, name)["error"]["message"] == (
            f"Failed to create snapshot content with error {text}"
        )


def test_a_deleted_snapshot_takes_its_content_only_with_deletion_policy_delete(
    kube: KubeEmulator,
) -> None:
    """snapshot_controller.go: the bound-protection finalizer is removed, and the content
    deleted when its deletionPolicy is Delete (kept when Retain)."""
    kube.add_controller(SnapshotController())
    put(kube, *volume("default", "data"))
    put(kube, snapshot_class("gone", "csi.example.com", "Delete"))
    put(kube, snapshot_class("kept", "csi.example.com", "Retain"))
    snapshot(kube, "a", "data", "gone")
    snapshot(kube, "b", "data", "kept")
    for name in ("a", "b"):
        eventually(name, lambda name=name: status(kube, name).get("readyToUse") is True)  # type: ignore[misc]
    contents = {n: status(kube, n)["boundVolumeSnapshotContentName"] for n in ("a", "b")}
    for name in ("a", "b"):
        kube.delete(*SNAP, "default", name)
    eventually("both gone", lambda: not kube.list_objects(*SNAP))
    assert kube.get_object(*CONTENTS, None, contents["a"]) is None
    assert kube.get_object(*CONTENTS, None, contents["b"]) is not None


def test_an_error_before_the_cut_stays_until_the_snapshot_is_ready(kube: KubeEmulator) -> None:
    """sidecar updateSnapshotContentStatus clears the content's error only when readyToUse
    changes to true, and common updateSnapshotStatus keeps the snapshot's copy until then:
    a snapshot cut (creationTime, snapshotHandle) but still uploading shows the error of
    the attempt before."""
    kube.add_controller(SnapshotController(failures=1, retry_seconds=0.1, ready_after=1.0))
    put(kube, *volume("default", "data"))
    put(kube, snapshot_class("fast", "csi.example.com", "Retain", default=True))
    snapshot(kube, "snap", "data")
    eventually("the cut", lambda: "creationTime" in status(kube, "snap"))
    cut = status(kube, "snap")
    assert cut["readyToUse"] is False
    assert cut["error"]["message"].startswith("Failed to create snapshot")
    assert cut["error"]["time"] <= cut["creationTime"]
    content = kube.get_object(*CONTENTS, None, cut["boundVolumeSnapshotContentName"]) or {}
    assert "snapshotHandle" in content["status"] and "error" in content["status"]
    eventually("ready", lambda: status(kube, "snap").get("readyToUse") is True)
    assert "error" not in status(kube, "snap")
