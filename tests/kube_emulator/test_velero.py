"""The emulator's Velero (`kube_velero.VeleroServer`).

Sources in vmware-tanzu/velero: pkg/apis/velero/v1/backup_types.go, pkg/controller/
backup_controller.go, pkg/backup/item_backupper.go, pkg/cmd/server/server.go.
"""

from __future__ import annotations

from typing import Any

from tests.support.kube import KubeEmulator, eventually
from tests.support.kube_storage import volume
from tests.support.kube_velero import RESTART_REASON, VeleroServer

BACKUPS = ("velero.io", "v1", "backups")


def backup(kube: KubeEmulator, name: str, **spec: Any) -> None:
    kube.put_object({"apiVersion": "velero.io/v1", "kind": "Backup",
                     "metadata": {"name": name, "namespace": "velero"},
                     "spec": {"includedNamespaces": ["shop"], **spec}})  # fmt: skip


def status(kube: KubeEmulator, name: str) -> dict[str, Any]:
    return dict((kube.get_object(*BACKUPS, "velero", name) or {}).get("status") or {})


def setup(kube: KubeEmulator) -> None:
    for name in ("velero", "shop"):
        kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    for obj in [*volume("shop", "db"), *volume("shop", "local", driver=None)]:
        kube.put_object(obj)


def test_a_restart_marks_in_progress_backups_failed_and_never_resumes_them(
    kube: KubeEmulator,
) -> None:
    """server.go markInProgressBackupsFailed: phase Failed, its failureReason, never resumed;
    the Backups after the restart are processed."""
    setup(kube)
    kube.add_controller(VeleroServer(restarts=1, duration=0.4))
    backup(kube, "first")
    eventually("failed", lambda: status(kube, "first").get("phase") == "Failed")
    assert status(kube, "first")["failureReason"] == RESTART_REASON
    backup(kube, "second")
    eventually("completed", lambda: status(kube, "second").get("phase") == "Completed")
    assert status(kube, "first")["phase"] == "Failed", "not resumed"


def test_volumes_are_counted_by_the_snapshotter_that_takes_them(kube: KubeEmulator) -> None:
    """backup_controller.go counts volumeSnapshots* (native) and csiVolumeSnapshots*;
    item_backupper.go skips a volume no snapshotter applies to, and the Backup completes."""
    setup(kube)
    kube.add_controller(VeleroServer(volume_snapshotter="csi"))
    backup(kube, "csi")
    eventually("csi", lambda: status(kube, "csi").get("phase") == "Completed")
    assert status(kube, "csi")["csiVolumeSnapshotsCompleted"] == 1, "the CSI volume only"
    kube.reset()
    setup(kube)
    kube.add_controller(VeleroServer(volume_snapshotter=None, failing=0))
    backup(kube, "none")
    eventually("none", lambda: status(kube, "none").get("phase") == "Completed")
    assert not any(key.endswith("Attempted") for key in status(kube, "none"))


def test_a_missing_storage_location_fails_validation(kube: KubeEmulator) -> None:
    """backup_controller.go prepareBackupRequest: FailedValidation with validationErrors."""
    setup(kube)
    kube.add_controller(VeleroServer(failing=1))
    backup(kube, "nowhere", storageLocation="offsite")
    eventually("validated", lambda: status(kube, "nowhere").get("phase") == "FailedValidation")
    assert "the default offsite was not found" in status(kube, "nowhere")["validationErrors"][0]
    backup(kube, "partial")
    eventually("partial", lambda: status(kube, "partial").get("phase") == "PartiallyFailed")
    assert status(kube, "partial")["errors"] == 1
