"""The emulator's Velero (`kube_velero.VeleroServer`), against Velero's own code.

Sources in vmware-tanzu/velero main at d30d389b (v1.18.1's controllers):
pkg/controller/backup_queue_controller.go, backup_controller.go (Reconcile,
prepareBackupRequest, runBackup), backup_operations_controller.go,
backup_finalizer_controller.go, pkg/backup/snapshots.go, pkg/backup/item_backupper.go,
internal/volumehelper/volume_policy_helper.go, pkg/podvolume/backupper.go,
pkg/cmd/server/server.go.
"""

from __future__ import annotations

from typing import Any

from tests.support.kube import KubeEmulator, eventually
from tests.support.kube_storage import volume
from tests.support.kube_store import Change, Store
from tests.support.kube_velero import (
    FS_BACKUP_VOLUMES,
    RESTART_REASON,
    VeleroServer,
    pod,
    storage_location,
)

BACKUPS = ("velero.io", "v1", "backups")
PVBS = ("velero.io", "v1", "podvolumebackups")
LOCATIONS = ("velero.io", "v1", "backupstoragelocations")
TERMINAL = ("Completed", "PartiallyFailed", "Failed", "FailedValidation")


class Phases:
    """Records each phase a Backup goes through, as a watch of Backups sees them."""

    def __init__(self) -> None:
        self.seen: dict[str, list[str]] = {}

    def react(self, store: Store, change: Change) -> None:
        if (change.group, change.plural) != ("velero.io", "backups") or change.type == "DELETED":
            return
        phase = (change.new.get("status") or {}).get("phase") or "New"
        seen = self.seen.setdefault(change.new["metadata"]["name"], [])
        if not seen or seen[-1] != phase:
            seen.append(phase)


def backup(kube: KubeEmulator, name: str, **spec: Any) -> None:
    kube.put_object({"apiVersion": "velero.io/v1", "kind": "Backup",
                     "metadata": {"name": name, "namespace": "velero"},
                     "spec": {"includedNamespaces": ["shop"], **spec}})  # fmt: skip


def get(kube: KubeEmulator, name: str) -> dict[str, Any]:
    return dict(kube.get_object(*BACKUPS, "velero", name) or {})


def status(kube: KubeEmulator, name: str) -> dict[str, Any]:
    return dict(get(kube, name).get("status") or {})


def ended(kube: KubeEmulator, name: str) -> dict[str, Any]:
    eventually(f"{name} ended", lambda: status(kube, name).get("phase") in TERMINAL)
    return status(kube, name)


def setup(kube: KubeEmulator) -> None:
    for name in ("velero", "shop"):
        kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    for obj in [*volume("shop", "db"), *volume("shop", "local", driver=None)]:
        kube.put_object(obj)


def test_a_backup_is_queued_started_and_finalized_with_the_servers_defaults_in_its_spec(
    kube: KubeEmulator,
) -> None:
    """backup_queue_controller.go (New -> Queued -> ReadyToStart); backup_controller.go
    prepareBackupRequest writes the server's defaults into spec in the patch that sets
    InProgress; runBackup -> Finalizing (the mounted volume by file system backup, the
    server's default: no operation to wait for); the finalizer -> Completed."""
    setup(kube)
    quiet = {"name": "quiet", "labels": {"velero.io/exclude-from-backup": "true"}}
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": quiet})
    kube.put_object(pod("shop", "db-0", {"data": "db"}, {}))
    phases = Phases()
    kube.add_controller(phases)
    kube.add_controller(
        VeleroServer(default_volumes_to_fs_backup=True, default_snapshot_move_data=False)
    )
    kube.put_object({"apiVersion": "velero.io/v1", "kind": "Backup",
                     "metadata": {"name": "all", "namespace": "velero"}, "spec": {}})  # fmt: skip
    assert ended(kube, "all")["phase"] == "Completed"
    assert phases.seen["all"] == [
        "New", "Queued", "ReadyToStart", "InProgress", "Finalizing", "Completed",
    ]  # fmt: skip
    written = get(kube, "all")
    assert written["spec"] == {
        "ttl": "720h0m0s",
        "volumeGroupSnapshotLabelKey": "velero.io/volume-group",
        "csiSnapshotTimeout": "10m0s",
        "itemOperationTimeout": "4h0m0s",
        "defaultVolumesToFsBackup": True,
        "snapshotMoveData": False,
        "storageLocation": "default",
        "excludedNamespaces": ["quiet"],
        "excludedClusterScopedResources": ["volumesnapshotcontents.snapshot.storage.k8s.io"],
        "excludedNamespaceScopedResources": ["volumesnapshots.snapshot.storage.k8s.io"],
        "includedNamespaces": ["*"],
    }
    assert written["metadata"]["labels"] == {"velero.io/storage-location": "default"}
    assert (written["status"]["version"], written["status"]["formatVersion"]) == (1, "1.1.0")
    assert "expiration" in written["status"] and "startTimestamp" in written["status"]
    assert len(kube.list_objects(*PVBS, "velero")) == 1


def test_csi_snapshots_wait_for_their_operations_and_count_as_velero_counts_them(
    kube: KubeEmulator,
) -> None:
    """runBackup: csiVolumeSnapshotsAttempted from the VolumeSnapshots, one operation each;
    WaitingForPluginOperations until they end; the finalizer sets
    csiVolumeSnapshotsCompleted (updateCSIVolumeSnapshotsCompleted). With snapshotMoveData
    GetBackupCSIResources lists no VolumeSnapshot: the CSI counts stay 0, the data
    uploads are the operations."""
    setup(kube)
    phases = Phases()
    kube.add_controller(phases)
    kube.add_controller(VeleroServer())
    backup(kube, "snap")
    counts = ended(kube, "snap")
    assert phases.seen["snap"][3:] == [
        "InProgress", "WaitingForPluginOperations", "Finalizing", "Completed",
    ]  # fmt: skip
    assert {k: v for k, v in counts.items() if k.startswith(("csi", "backupItem", "volume"))} == {
        "csiVolumeSnapshotsAttempted": 1,
        "csiVolumeSnapshotsCompleted": 1,
        "backupItemOperationsAttempted": 1,
        "backupItemOperationsCompleted": 1,
    }, "the CSI volume only: no snapshotter applies to the other"
    backup(kube, "moved", snapshotMoveData=True)
    counts = ended(kube, "moved")
    assert counts["phase"] == "Completed"
    assert not any(key.startswith("csi") for key in counts)
    assert (counts["backupItemOperationsAttempted"], counts["backupItemOperationsCompleted"]) == (
        1,
        1,
    )


def test_a_failed_snapshot_operation_ends_partially_failed_through_its_partial_phases(
    kube: KubeEmulator,
) -> None:
    """backup_operations_controller.go: an operation's error makes the Backup
    WaitingForPluginOperationsPartiallyFailed, then FinalizingPartiallyFailed; the finalizer
    makes it PartiallyFailed."""
    setup(kube)
    phases = Phases()
    kube.add_controller(phases)
    kube.add_controller(VeleroServer(failing=1))
    backup(kube, "partial")
    counts = ended(kube, "partial")
    assert phases.seen["partial"][-3:] == [
        "WaitingForPluginOperations", "FinalizingPartiallyFailed", "PartiallyFailed",
    ]  # fmt: skip
    assert (counts["errors"], counts["backupItemOperationsFailed"]) == (1, 1)
    assert "csiVolumeSnapshotsCompleted" not in counts


def test_volumes_are_counted_by_the_snapshotter_that_takes_them(kube: KubeEmulator) -> None:
    """backup_controller.go counts volumeSnapshots* (native); item_backupper.go
    takePVSnapshot skips a volume no snapshotter applies to, and the Backup completes."""
    setup(kube)
    kube.add_controller(VeleroServer(volume_snapshotter="native"))
    backup(kube, "native")
    counts = ended(kube, "native")
    assert (counts["volumeSnapshotsAttempted"], counts["volumeSnapshotsCompleted"]) == (2, 2)
    kube.reset()
    setup(kube)
    kube.add_controller(VeleroServer(volume_snapshotter=None))
    backup(kube, "none")
    counts = ended(kube, "none")
    assert counts["phase"] == "Completed"
    assert not any(key.endswith("Attempted") for key in counts)


def test_a_volume_a_pod_opts_into_file_system_backup_gets_a_pod_volume_backup_not_a_snapshot(
    kube: KubeEmulator,
) -> None:
    """volume_policy_helper.go ShouldPerformSnapshot skips a PV "backed up with
    PodVolumeBackup" (shouldPerformFSBackupLegacy: annotation backup.velero.io/backup-volumes);
    podvolume/backupper.go labels the PodVolumeBackup velero.io/backup-name and
    velero.io/pvc-uid."""
    setup(kube)
    kube.put_object(pod("shop", "db-0", {"data": "db"}, {FS_BACKUP_VOLUMES: "data"}))
    kube.add_controller(VeleroServer())
    backup(kube, "fs")
    counts = ended(kube, "fs")
    assert counts["phase"] == "Completed"
    assert not any(key.endswith("Attempted") for key in counts), "no snapshot"
    [pvb] = kube.list_objects(*PVBS, "velero")
    claim = kube.get_object("", "v1", "persistentvolumeclaims", "shop", "db") or {}
    assert pvb["metadata"]["labels"]["velero.io/backup-name"] == "fs"
    assert pvb["metadata"]["labels"]["velero.io/pvc-uid"] == claim["metadata"]["uid"]
    assert pvb["status"]["phase"] == "Completed"


def test_excluded_namespaces_and_volumes_are_not_backed_up(kube: KubeEmulator) -> None:
    """prepareBackupRequest adds namespaces labelled velero.io/exclude-from-backup=true to
    spec.excludedNamespaces, before it validates the lists (v1.18.1 and main d30d389b:
    ValidateNamespaceIncludesExcludes refuses a namespace in both, so a labelled namespace
    the Backup names fails validation; one a pattern matches is left out); item_backupper.go
    skips an item with that label."""
    setup(kube)
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "blog"}})
    excluded = volume("shop", "cache", labels={"velero.io/exclude-from-backup": "true"})
    for obj in [*volume("blog", "content"), *excluded]:
        kube.put_object(obj)
    kube.add_controller(VeleroServer())
    backup(kube, "shop-and-blog", includedNamespaces=["shop", "blog"])
    assert ended(kube, "shop-and-blog")["csiVolumeSnapshotsCompleted"] == 2, "db and content"
    labelled = {"name": "blog", "labels": {"velero.io/exclude-from-backup": "true"}}
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": labelled})
    backup(kube, "shop-only", includedNamespaces=["shop", "b*"])
    assert ended(kube, "shop-only")["csiVolumeSnapshotsCompleted"] == 1, "db only"
    assert get(kube, "shop-only")["spec"]["excludedNamespaces"] == ["blog"]
    # Named, the labelled namespace is in both lists: ValidateNamespaceIncludesExcludes.
    backup(kube, "named", includedNamespaces=["shop", "blog"])
    assert ended(kube, "named")["validationErrors"] == [
        "Invalid included/excluded namespace lists: excludes list cannot contain an item in"
        " the includes list: blog"
    ]


def test_namespace_patterns_are_expanded_against_the_live_namespaces_and_kept_in_the_spec(
    kube: KubeEmulator,
) -> None:
    """Velero 1.18 (main d30d389b): pkg/backup/backup.go getNamespaceIncludesExcludes calls
    NamespaceIncludesExcludes.ExpandIncludesExcludes (pkg/util/collections
    includes_excludes.go), which expands an include or exclude holding `*`, `?` or `[`
    (pkg/util/wildcard/expand.go containsWildcardPattern, gobwas/glob) against the cluster's
    namespaces; the spec keeps the pattern. Patterns that match nothing back up nothing
    (ShouldInclude). The emulator read `app-*` as a namespace's name and backed up nothing."""
    setup(kube)
    for name in ("app-1", "app-2", "app-3", "apple"):
        kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        for obj in volume(name, "data"):
            kube.put_object(obj)
    kube.add_controller(VeleroServer())
    backup(kube, "apps", includedNamespaces=["app-*"], excludedNamespaces=["app-[3]"])
    assert ended(kube, "apps")["csiVolumeSnapshotsCompleted"] == 2, "app-1 and app-2"
    assert get(kube, "apps")["spec"]["includedNamespaces"] == ["app-*"]
    backup(kube, "one", includedNamespaces=["app-?"], excludedNamespaces=["app-[12]"])
    assert ended(kube, "one")["csiVolumeSnapshotsCompleted"] == 1, "app-3"
    backup(kube, "none", includedNamespaces=["db-*"])
    counts = ended(kube, "none")
    assert counts["phase"] == "Completed"
    assert not any(key.endswith("Attempted") for key in counts), "not every namespace"


def test_namespace_patterns_velero_cannot_read_fail_validation(kube: KubeEmulator) -> None:
    """backup_controller.go prepareBackupRequest: collections.ValidateNamespaceIncludesExcludes
    (wildcard.ValidateNamespaceName: no `|()!{},`, no `**`, brackets closed and not empty;
    then the name with `*?[]` read as `x` must be a namespace name), "Invalid
    included/excluded namespace lists: ..."."""
    setup(kube)
    kube.add_controller(VeleroServer())
    backup(kube, "bang", includedNamespaces=["app-[!1]"])
    backup(kube, "stars", includedNamespaces=["app-**"])
    backup(kube, "open", includedNamespaces=["app-[1"])
    backup(kube, "upper", includedNamespaces=["App-*"])
    prefix = "Invalid included/excluded namespace lists: wildcard pattern contains "
    assert ended(kube, "bang")["validationErrors"] == [
        f"{prefix}unsupported characters: |, (, ), !, {{, }}, ,"
    ]
    assert ended(kube, "stars")["validationErrors"] == [
        f"{prefix}consecutive asterisks (only single * allowed)"
    ]
    assert ended(kube, "open")["validationErrors"] == [f"{prefix}unclosed bracket '['"]
    [upper] = ended(kube, "upper")["validationErrors"]
    assert upper.startswith('Invalid included/excluded namespace lists: invalid namespace "App-*"')
    assert status(kube, "upper")["phase"] == "FailedValidation"


def test_a_backup_waits_queued_while_another_of_its_namespaces_runs(kube: KubeEmulator) -> None:
    """backup_queue_controller.go: a Queued Backup stays Queued while --concurrent-backups (1)
    Backups are ReadyToStart or InProgress, and is dequeued when one leaves InProgress."""
    setup(kube)
    kube.add_controller(VeleroServer(duration=1.0))
    backup(kube, "first")
    eventually("first runs", lambda: status(kube, "first").get("phase") == "InProgress")
    backup(kube, "second")
    eventually("second queued", lambda: status(kube, "second").get("phase") == "Queued")
    assert status(kube, "second")["queuePosition"] == 1
    assert status(kube, "first")["phase"] == "InProgress", "still running"
    assert ended(kube, "second")["phase"] == "Completed"


def test_storage_location_validation_errors_are_veleros_words(kube: KubeEmulator) -> None:
    """prepareBackupRequest: a location not found (server default or named), one in
    read-only mode, one whose phase is not Available (BSLIsAvailable) give
    FailedValidation with these validationErrors, and the spec as defaulted."""
    setup(kube)
    kube.add_controller(VeleroServer(locations=()))
    backup(kube, "nowhere")
    assert ended(kube, "nowhere")["validationErrors"] == [
        "an existing backup storage location was not specified at backup creation time and "
        "the server default default does not exist. Please address this issue (see `velero "
        "backup-location -h` for options) and create a new backup. Error: "
        'backupstoragelocations.velero.io "default" not found'
    ]
    backup(kube, "offsite", storageLocation="offsite")
    assert "and the default offsite was not found" in ended(kube, "offsite")["validationErrors"][0]
    kube.put_object(storage_location("down", phase="Unavailable"))
    kube.put_object(storage_location("frozen", access_mode="ReadOnly"))
    backup(kube, "down", storageLocation="down")
    assert ended(kube, "down") | {"expiration": ""} == {
        "phase": "FailedValidation",
        "validationErrors": [
            "backup can't be created because BackupStorageLocation down is in Unavailable status."
        ],
        "version": 1,
        "formatVersion": "1.1.0",
        "expiration": "",
    }
    assert get(kube, "down")["spec"]["snapshotMoveData"] is False, "defaults written too"
    backup(kube, "frozen", storageLocation="frozen")
    assert ended(kube, "frozen")["validationErrors"] == [
        "backup can't be created because backup storage location frozen is currently in "
        "read-only mode"
    ]


def test_a_restart_marks_in_progress_backups_failed_and_never_resumes_them(
    kube: KubeEmulator,
) -> None:
    """server.go markInProgressBackupsFailed: phase Failed, its failureReason, never resumed;
    the Backups after the restart are processed."""
    setup(kube)
    kube.add_controller(VeleroServer(restarts=1, duration=0.4))
    backup(kube, "first")
    assert ended(kube, "first") | {"completionTimestamp": ""} == {
        "phase": "Failed",
        "failureReason": RESTART_REASON,
        "completionTimestamp": "",
        "startTimestamp": status(kube, "first")["startTimestamp"],
        "expiration": status(kube, "first")["expiration"],
        "version": 1,
        "formatVersion": "1.1.0",
    }
    backup(kube, "second")
    assert ended(kube, "second")["phase"] == "Completed"
    assert status(kube, "first")["phase"] == "Failed", "not resumed"
    assert [loc["metadata"]["name"] for loc in kube.list_objects(*LOCATIONS, "velero")] == [
        "default"
    ]
