"""`backup_pvs` with the velero backend, against the emulator's Velero.

`kube_velero.VeleroServer` is written from vmware-tanzu/velero main at d30d389b (v1.18.1's
controllers): it queues, validates, writes the server's defaults into the Backup's spec,
snapshots or backs up by file system, waits for its plugin operations, finalizes, restarts
mid-backup, skips volumes or fails some. The tests check what the step makes of it: the
retries (a restart, a storage location that comes back), the volumes counted as Velero
wrote the Backup, the phases waited for and the messages.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.steps.conftest import Context, run
from tests.steps.pvcs import put, put_pvcs
from tests.support.kube import KubeEmulator, eventually
from tests.support.kube_storage import volume
from tests.support.kube_velero import (
    FS_BACKUP_VOLUMES,
    RESTART_REASON,
    VeleroServer,
    pod,
    storage_location,
)
from workflows import errors
from workflows.steps import registry

BACKUP = ("velero.io", "v1", "backups")
LOCATION = ("velero.io", "v1", "backupstoragelocations")
VELERO: dict[str, Any] = {
    "backend": "velero",
    "namespaces": ["shop"],
    "labelSelector": {"backup": "yes"},
    "ttl": "240h0m0s",
    "pollSeconds": 1,
}
UNAVAILABLE = (
    "backup can't be created because BackupStorageLocation default is in Unavailable status."
)


@pytest.fixture
def pvcs(kube: KubeEmulator) -> None:
    put_pvcs(kube)


@pytest.fixture
def velero_namespace(kube: KubeEmulator) -> None:
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "velero"}})


def finish(ctx: registry.StepContext) -> registry.Done:
    """Poll the step until it is done (the emulator's Velero works meanwhile)."""
    outcomes: list[registry.Outcome] = []

    def done() -> bool:
        outcomes.append(run(ctx))
        return isinstance(outcomes[-1], registry.Done)

    eventually("the backup", done)
    last = outcomes[-1]
    assert isinstance(last, registry.Done)
    return last


def failure(ctx: registry.StepContext) -> errors.PermanentError:
    """Poll the step until it fails, and the failure."""
    failed: list[errors.PermanentError] = []

    def done() -> bool:
        try:
            outcome = run(ctx)
        except errors.PermanentError as exc:
            failed.append(exc)
            return True
        assert isinstance(outcome, registry.Poll), f"not a failure: {outcome}"
        return False

    eventually("the failure", done)
    return failed[0]


def polled_until(ctx: registry.StepContext, text: str) -> registry.Poll:
    """Poll the step until its message has `text`, and that poll."""
    polls: list[registry.Outcome] = []

    def seen() -> bool:
        polls.append(run(ctx))
        return text in getattr(polls[-1], "message", "")

    eventually(text, seen)
    last = polls[-1]
    assert isinstance(last, registry.Poll)
    return last


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_velero_backs_up_the_chosen_namespaces_and_counts_their_data_uploads(
    kube: KubeEmulator, context: Context
) -> None:
    """velero backup_types.go (spec, phases); pkg/backup/snapshots.go GetBackupCSIResources
    lists no VolumeSnapshot with snapshotMoveData, so the data uploads (backup item
    operations) are what count, not csiVolumeSnapshots*."""
    kube.add_controller(VeleroServer(volume_snapshotter="csi"))
    params = {**VELERO, "defaultVolumesToFsBackup": False, "snapshotMoveData": True}
    ctx = context("backup_pvs", params, hook="BeforeClusterDelete")
    first = run(ctx)
    assert isinstance(first, registry.Poll)
    [backup] = kube.list_objects(*BACKUP)
    assert backup["metadata"]["name"] == "hooksvc-7-backup"
    sent = {
        "includedNamespaces": ["shop"],
        "labelSelector": {"matchLabels": {"backup": "yes"}},
        "snapshotVolumes": True,
        "ttl": "240h0m0s",
        "defaultVolumesToFsBackup": False,
        "snapshotMoveData": True,
    }
    assert {key: backup["spec"][key] for key in sent} == sent, "Velero keeps what was set"
    # A second start finds the Backup the first one made.
    assert isinstance(run(context("backup_pvs", params, hook="BeforeClusterDelete")), registry.Poll)
    assert len(kube.list_objects(*BACKUP)) == 1
    done = finish(ctx)
    assert done.output["backup"] == {
        "namespace": "velero",
        "name": "hooksvc-7-backup",
        "phase": "Completed",
        "backupItemOperationsAttempted": 1,
        "backupItemOperationsCompleted": 1,
    }
    assert (done.output["volumesCovered"], done.output["volumesSnapshotted"]) == (1, 1)
    assert done.output["attempts"] == [{"name": "hooksvc-7-backup", "phase": "Completed"}]


@pytest.mark.parametrize("server", ["default-snapshot-move-data", "default-volumes-to-fs-backup"])
@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_the_servers_defaults_are_read_from_the_backup_velero_wrote(
    kube: KubeEmulator, context: Context, server: str
) -> None:
    """velero pkg/controller/backup_controller.go prepareBackupRequest (main d30d389b): a
    Backup that leaves defaultVolumesToFsBackup or snapshotMoveData unset gets the server's
    --default-volumes-to-fs-backup / --default-snapshot-move-data written into its spec.
    Judged by the template's parameters instead, a good backup failed as "0 of 1 volumes"
    (the data uploads, or the file system backup of the Pod's volume, not counted)."""
    kube.add_controller(
        VeleroServer(
            default_snapshot_move_data=server == "default-snapshot-move-data",
            default_volumes_to_fs_backup=server == "default-volumes-to-fs-backup",
        )
    )
    put(kube, pod("shop", "db-0", {"data": "db"}, {}))
    done = finish(context("backup_pvs", VELERO))
    [backup] = kube.list_objects(*BACKUP)
    if server == "default-snapshot-move-data":
        assert backup["spec"]["snapshotMoveData"] is True
        assert (done.output["volumesSnapshotted"], done.output["volumesByFsBackup"]) == (1, 0)
    else:
        assert backup["spec"]["defaultVolumesToFsBackup"] is True
        assert (done.output["volumesSnapshotted"], done.output["volumesByFsBackup"]) == (0, 1)
    assert done.output["volumesCovered"] == 1


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_a_volume_a_pod_opts_into_file_system_backup_counts_as_backed_up(
    kube: KubeEmulator, context: Context
) -> None:
    """velero internal/volumehelper/volume_policy_helper.go ShouldPerformSnapshot: a PV whose
    Pod volume is opted into file system backup (annotation backup.velero.io/backup-volumes)
    is not snapshotted; pkg/podvolume/backupper.go makes a PodVolumeBackup labelled
    velero.io/backup-name and velero.io/pvc-uid. Counting snapshots only failed it."""
    kube.add_controller(VeleroServer())
    put(kube, *volume("shop", "files", labels={"backup": "yes"}))
    put(kube, pod("shop", "cms-0", {"uploads": "files"}, {FS_BACKUP_VOLUMES: "uploads"}))
    done = finish(context("backup_pvs", VELERO))
    assert done.output["volumesCovered"] == 2, "shop/db and shop/files"
    assert (done.output["volumesSnapshotted"], done.output["volumesByFsBackup"]) == (1, 1)


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_a_namespace_velero_excludes_by_its_label_is_not_counted(
    kube: KubeEmulator, context: Context
) -> None:
    """velero backup_controller.go prepareBackupRequest adds every namespace labelled
    velero.io/exclude-from-backup=true to spec.excludedNamespaces; item_backupper.go skips
    a PVC with that label. Counted from the template's namespaces, the good backup failed as
    "1 of 4 volumes". It does so before ValidateNamespaceIncludesExcludes (v1.18.1, main
    d30d389b), which refuses a namespace in both lists: a labelled namespace the template
    names fails validation, one its pattern matches is left out."""
    labelled = {"name": "blog", "labels": {"velero.io/exclude-from-backup": "true"}}
    put(kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": labelled})
    excluded = {"backup": "yes", "velero.io/exclude-from-backup": "true"}
    put(kube, *volume("shop", "scratch", labels=excluded))
    kube.add_controller(VeleroServer())
    done = finish(context("backup_pvs", {**VELERO, "namespaces": ["shop", "b*"]}))
    [backup] = kube.list_objects(*BACKUP)
    assert backup["spec"]["excludedNamespaces"] == ["blog"]
    assert (done.output["volumesCovered"], done.output["volumesSnapshotted"]) == (1, 1)
    # Named, it is in both lists, which Velero refuses (and would again).
    named = failure(context("backup_pvs", {**VELERO, "namespaces": ["shop", "blog"]}, run_id=8))
    assert named.message == (
        "Backup velero/hooksvc-8-backup ended in phase FailedValidation: Invalid"
        " included/excluded namespace lists: excludes list cannot contain an item in the"
        " includes list: blog"
    )


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_an_unavailable_storage_location_is_waited_for_then_a_new_backup_starts(
    kube: KubeEmulator, context: Context
) -> None:
    """velero backup_controller.go prepareBackupRequest (>= 1.17): a BackupStorageLocation
    not Available gives FailedValidation, "... is in Unavailable status."; the BSL
    controller (backup_storage_location_controller.go) sets it Available again at its next
    validation. The step waits for that, without a new Backup meanwhile, then starts one."""
    kube.put_object(storage_location("default", phase="Unavailable", default=True))
    kube.add_controller(VeleroServer())
    ctx = context("backup_pvs", VELERO)
    waiting = polled_until(ctx, "waiting for")
    assert waiting.message == (
        "Backup velero/hooksvc-7-backup failed validation; waiting for BackupStorageLocation "
        "velero/default to be Available to start Backup 2 of 3"
    )
    assert waiting.output is not None
    assert waiting.output["backup"]["validationErrors"] == [UNAVAILABLE]
    assert waiting.output["storageLocation"] == {"name": "default", "phase": "Unavailable"}
    assert isinstance(run(ctx), registry.Poll)
    assert len(kube.list_objects(*BACKUP)) == 1, "no new Backup while it is Unavailable"
    kube.set_status(*LOCATION, "velero", "default", {"phase": "Available", "message": None})
    done = finish(ctx)
    assert done.output["attempts"] == [
        {
            "name": "hooksvc-7-backup",
            "phase": "FailedValidation",
            "validationErrors": [UNAVAILABLE],
        },
        {"name": "hooksvc-7-backup-a2", "phase": "Completed"},
    ]


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_a_storage_location_that_stays_unavailable_fails_at_the_timeout_or_attempts(
    kube: KubeEmulator, context: Context
) -> None:
    """The wait is bounded: by the step's timeout, and by backupAttempts Backups."""
    kube.put_object(storage_location("default", phase="Unavailable", default=True))
    kube.add_controller(VeleroServer())
    ctx = context("backup_pvs", VELERO)
    polled_until(ctx, "waiting for")
    ctx.deadline = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        "BackupStorageLocation velero/default is not Available at the step's timeout: "
        + UNAVAILABLE
    )
    once = context("backup_pvs", {**VELERO, "backupAttempts": 1}, run_id=8)
    assert failure(once).message == (
        f"Backup velero/hooksvc-8-backup ended in phase FailedValidation: {UNAVAILABLE}"
    )


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_a_validation_error_that_would_come_again_fails_at_once(
    kube: KubeEmulator, context: Context
) -> None:
    """prepareBackupRequest: a read-only location fails every Backup alike; with it, an
    Unavailable status is no reason to try again."""
    kube.put_object(storage_location("default", phase="Unavailable", access_mode="ReadOnly"))
    kube.add_controller(VeleroServer())
    assert failure(context("backup_pvs", VELERO)).message == (
        "Backup velero/hooksvc-7-backup ended in phase FailedValidation: backup can't be "
        "created because backup storage location default is currently in read-only mode; "
        + UNAVAILABLE
    )
    assert len(kube.list_objects(*BACKUP)) == 1


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_a_backup_queued_behind_another_is_waited_for_and_named_at_the_timeout(
    kube: KubeEmulator, context: Context
) -> None:
    """velero backup_queue_controller.go (v1.18): a Backup whose namespaces overlap a running
    one's stays Queued. The step waits, saying so, and at its timeout fails naming the phase
    (it polled without end before)."""
    kube.add_controller(VeleroServer(duration=60))
    kube.put_object({"apiVersion": "velero.io/v1", "kind": "Backup",
                     "metadata": {"name": "nightly", "namespace": "velero"},
                     "spec": {"includedNamespaces": ["*"]}})  # fmt: skip
    ctx = context("backup_pvs", VELERO)
    queued = polled_until(ctx, "is Queued")
    assert queued.message == "Backup velero/hooksvc-7-backup is Queued"
    assert queued.output is not None and queued.output["backup"]["queuePosition"] == 1
    ctx.deadline = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        "Backup velero/hooksvc-7-backup is still Queued at the step's timeout"
    )


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_a_backup_being_deleted_fails_the_step_at_once(
    kube: KubeEmulator, context: Context
) -> None:
    """velero pkg/controller/backup_deletion_controller.go Reconcile: a Backup someone
    deletes (`velero backup delete`) is patched to phase Deleting and then removed: it will
    not complete. The test plays that controller's patch."""
    kube.add_controller(VeleroServer(duration=60))
    ctx = context("backup_pvs", VELERO)
    polled_until(ctx, "is InProgress")
    kube.set_status(*BACKUP, "velero", "hooksvc-7-backup", {"phase": "Deleting"})
    assert failure(ctx).message == "Backup velero/hooksvc-7-backup ended in phase Deleting"


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_a_backup_failed_by_a_velero_restart_is_started_again_under_a_new_name(
    kube: KubeEmulator, context: Context
) -> None:
    """velero pkg/cmd/server/server.go markInProgressBackupsFailed: a restarting server marks
    InProgress Backups Failed and never resumes them (VeleroServer restarts once)."""
    kube.add_controller(VeleroServer(restarts=1))
    ctx = context("backup_pvs", VELERO)
    done = finish(ctx)
    assert [b["metadata"]["name"] for b in kube.list_objects(*BACKUP)] == [
        "hooksvc-7-backup",
        "hooksvc-7-backup-a2",
    ]
    assert done.output["attempts"] == [
        {"name": "hooksvc-7-backup", "phase": "Failed", "failureReason": RESTART_REASON},
        {"name": "hooksvc-7-backup-a2", "phase": "Completed"},
    ]
    assert done.output["backup"]["phase"] == "Completed"


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_backups_failed_on_every_attempt_fail_the_step_with_veleros_reason(
    kube: KubeEmulator, context: Context
) -> None:
    """server.go markInProgressBackupsFailed, on every attempt: bounded by backupAttempts."""
    kube.add_controller(VeleroServer(restarts=5))
    ctx = context("backup_pvs", {**VELERO, "backupAttempts": 2})
    assert failure(ctx).message == (
        "Backup velero/hooksvc-7-backup-a2 ended in phase Failed after 2 attempts: "
        + RESTART_REASON
    )
    assert len(kube.list_objects(*BACKUP)) == 2


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_a_completed_backup_without_its_volume_snapshots_fails_the_step(
    kube: KubeEmulator, context: Context
) -> None:
    """velero pkg/backup/item_backupper.go takePVSnapshot: a volume with no applicable
    volume snapshotter is skipped and the Backup still completes (VeleroServer with none).
    With file system backup by default an unmounted volume is still left to the
    snapshotter (volume_policy_helper.go ShouldPerformSnapshot); a mounted one is not."""
    kube.add_controller(VeleroServer(volume_snapshotter=None))
    skipped = (
        "completed but backed up 0 of 1 volume (Velero skips a volume it has no snapshotter for)"
    )
    assert failure(context("backup_pvs", VELERO)).message == (
        f"Backup velero/hooksvc-7-backup {skipped}"
    )
    fs = {**VELERO, "defaultVolumesToFsBackup": True}
    assert failure(context("backup_pvs", fs, run_id=8)).message == (
        f"Backup velero/hooksvc-8-backup {skipped}"
    )
    put(kube, pod("shop", "db-0", {"data": "db"}, {}))
    assert finish(context("backup_pvs", fs, run_id=9)).output["volumesByFsBackup"] == 1
    nothing = {**VELERO, "snapshotVolumes": False}
    assert finish(context("backup_pvs", nothing, run_id=10)).output["volumeCheck"] == (
        "not checked: snapshotVolumes is false"
    )


@pytest.mark.parametrize("snapshotter", [None, "csi"])
@pytest.mark.usefixtures("velero_namespace")
def test_a_namespace_pattern_is_counted_as_velero_expands_it(
    kube: KubeEmulator, context: Context, snapshotter: str | None
) -> None:
    """Velero 1.18 (main d30d389b) pkg/util/wildcard/expand.go, pkg/backup/backup.go
    getNamespaceIncludesExcludes: `app-*` in includedNamespaces is matched against the live
    namespaces, and the Backup's spec keeps `app-*`. Read as a namespace's name, the step
    covered "0 of 0" volumes, so a Backup that skipped every volume (no snapshotter)
    passed and released BeforeClusterDelete."""
    for name in ("app-1", "app-2", "other"):
        put(kube, *volume(name, "data", labels={"backup": "yes"}))
    kube.add_controller(VeleroServer(volume_snapshotter=snapshotter))
    ctx = context("backup_pvs", {**VELERO, "namespaces": ["app-*"]}, hook="BeforeClusterDelete")
    if snapshotter is None:
        assert failure(ctx).message == (
            "Backup velero/hooksvc-7-backup completed but backed up 0 of 2 volumes "
            "(Velero skips a volume it has no snapshotter for)"
        )
        return
    done = finish(ctx)
    assert (done.output["volumesCovered"], done.output["volumesSnapshotted"]) == (2, 2)
    [backup] = kube.list_objects(*BACKUP)
    assert backup["spec"]["includedNamespaces"] == ["app-*"]


def test_namespace_patterns_velero_would_refuse_are_refused_when_applied() -> None:
    """velero pkg/util/wildcard/expand.go ValidateNamespaceName and
    pkg/util/collections/includes_excludes.go ValidateNamespaceIncludesExcludes: the Backup
    would end FailedValidation; the template is refused instead, naming the item."""
    for bad, why in [
        ("app-[!1]", "uses '|()!{},'"),
        ("app-**", "has ** (only single * are allowed)"),
        ("app-[1", "has a [ without its ]"),
        ("App-*", "is not a namespace name"),
    ]:
        with pytest.raises(registry.ParamError) as exc:
            params = {"backend": "velero", "namespaces": ["shop", bad]}
            registry.validate("backup_pvs", params, hook="BeforeClusterDelete")
        assert str(exc.value).startswith(f"namespaces: item 1, {bad!r} {why}"), str(exc.value)
    with pytest.raises(registry.ParamError) as exc:
        registry.validate("backup_pvs", {"namespaces": ["*", "shop"]}, hook="BeforeClusterDelete")
    assert str(exc.value) == "namespaces: '*' (every namespace) must be the only item"
    good = {"namespaces": ["app-*", "db-?", "web-[a-c]", "shop"]}
    assert registry.validate("backup_pvs", good, hook="BeforeClusterDelete")["namespaces"]


@pytest.mark.parametrize("allow", [False, True])
@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_a_partially_failed_backup_passes_only_when_the_template_allows_it(
    kube: KubeEmulator, context: Context, allow: bool
) -> None:
    """backup_operations_controller.go: a failed operation (here the CSI snapshot) ends
    PartiallyFailed through WaitingForPluginOperationsPartiallyFailed and
    FinalizingPartiallyFailed, which the step waits through."""
    kube.add_controller(VeleroServer(failing=1))
    ctx = context("backup_pvs", {**VELERO, "allowPartiallyFailed": allow})
    if allow:
        assert finish(ctx).output["backup"]["errors"] == 1
        return
    exc = failure(ctx)
    assert exc.message == "Backup velero/hooksvc-7-backup ended in phase PartiallyFailed"
    assert exc.output is not None and exc.output["backup"]["backupItemOperationsFailed"] == 1


@pytest.mark.usefixtures("velero_namespace")
def test_a_backup_that_fails_validation_names_veleros_validation_errors(
    kube: KubeEmulator, context: Context
) -> None:
    """velero pkg/controller/backup_controller.go prepareBackupRequest: a storage location
    that does not exist is a validation error that the next Backup would meet again."""
    kube.add_controller(VeleroServer())
    ctx = context("backup_pvs", {**VELERO, "storageLocation": "offsite"})
    assert failure(ctx).message == (
        "Backup velero/hooksvc-7-backup ended in phase FailedValidation: an existing "
        "backup storage location was not specified at backup creation time and the "
        "default offsite was not found. Please address this issue (see `velero "
        "backup-location -h` for options) and create a new backup. Error: "
        'backupstoragelocations.velero.io "offsite" not found'
    )
    assert len(kube.list_objects(*BACKUP)) == 1
