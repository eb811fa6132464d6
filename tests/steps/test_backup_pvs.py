"""`backup_pvs` against the emulator: CSI snapshots and Velero backups in the workload cluster.

CSI: the emulator's external-snapshotter (`kube_storage.SnapshotController`) binds, errors
and readies the snapshots; the tests check which PVCs are snapshotted (Bound, CSI) with
which class (per driver), that an error is waited out, what is recorded of each snapshot,
and the Retain rule before a deletion. Velero: the emulator's Velero
(`kube_velero.VeleroServer`) completes, fails validation, restarts mid-backup, skips
volumes or fails some; the tests check the retries, the volume counts and the messages.
Also a missing kubeconfig Secret and an unreachable API server.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.steps.conftest import CLUSTER, NS, Context, run
from tests.support.kube import KubeEmulator, eventually
from tests.support.kube_storage import SnapshotController, snapshot_class, volume
from tests.support.kube_velero import RESTART_REASON, VeleroServer
from workflows import errors
from workflows.kube import k8s
from workflows.steps import registry

SNAP = ("snapshot.storage.k8s.io", "v1", "volumesnapshots")
BACKUP = ("velero.io", "v1", "backups")
FAST, SLOW = "fast.csi.example.com", "slow.csi.example.com"


def put(kube: KubeEmulator, *objects: dict[str, Any]) -> None:
    for obj in objects:
        if obj["kind"] == "PersistentVolumeClaim":
            namespace = {"apiVersion": "v1", "kind": "Namespace"}
            kube.put_object({**namespace, "metadata": {"name": obj["metadata"]["namespace"]}})
        kube.put_object(obj)


@pytest.fixture
def pvcs(kube: KubeEmulator) -> None:
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


CSI = {"namespaces": ["shop", "blog"], "labelSelector": {"backup": "yes"}, "pollSeconds": 5}
SKIPPED = [
    {"namespace": "blog", "persistentVolumeClaim": "draft", "reason": "not bound (phase Pending)"},
    {
        "namespace": "blog",
        "persistentVolumeClaim": "legacy",
        "reason": "PersistentVolume pvc-blog-legacy is not a CSI volume",
    },
]


@pytest.mark.usefixtures("pvcs")
def test_csi_snapshots_bound_csi_volumes_with_their_drivers_class_and_records_each_one(
    kube: KubeEmulator, context: Context
) -> None:
    """external-snapshotter snapshot_controller.go: only a PVC Bound to a CSI volume can be
    snapshotted (getVolumeFromVolumeSnapshot, pvDriverFromSnapshot); a class is its driver's
    (SetDefaultSnapshotClass: the driver's is-default-class one); types.go: the
    VolumeSnapshotContent holds snapshotHandle, driver, restoreSize, deletionPolicy."""
    kube.add_controller(SnapshotController(ready_after=0.5))
    params = {**CSI, "volumeSnapshotClasses": {FAST: "fast-retain"}}
    ctx = context("backup_pvs", params)
    first = run(ctx)
    assert isinstance(first, registry.Poll)
    assert (first.after, first.message) == (5, "0 of 2 volume snapshots ready")
    assert first.output is not None and first.output["skipped"] == SKIPPED
    snapshots = kube.list_objects(*SNAP)
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in snapshots] == [
        ("blog", "hooksvc-7-backup-content"),
        ("shop", "hooksvc-7-backup-db"),
    ]
    db = snapshots[1]
    assert db["metadata"]["labels"] == {"hooksvc.io/run": "7", "hooksvc.io/step": "backup"}
    assert db["spec"] == {
        "source": {"persistentVolumeClaimName": "db"},
        "volumeSnapshotClassName": "fast-retain",
    }
    assert snapshots[0]["spec"]["volumeSnapshotClassName"] == "slow-retain", "its default"
    # A second start (a redelivered message, memo lost) finds what the first one made.
    again = context("backup_pvs", params)
    assert isinstance(run(again), registry.Poll)
    assert len(kube.list_objects(*SNAP)) == 2
    eventually("ready", lambda: isinstance(run(ctx), registry.Done))
    done = run(ctx)
    assert isinstance(done, registry.Done)
    content, db_volume = done.output["volumes"]
    assert db_volume["snapshotHandle"].startswith("snap-")
    assert db_volume["volumeSnapshotContent"].startswith("snapcontent-")
    del db_volume["snapshotHandle"], db_volume["volumeSnapshotContent"]
    assert db_volume == {
        "namespace": "shop",
        "persistentVolumeClaim": "db",
        "volumeSnapshot": "hooksvc-7-backup-db",
        "driver": FAST,
        "volumeSnapshotClassName": "fast-retain",
        "deletionPolicy": "Retain",
        "readyToUse": True,
        "restoreSize": "10Gi",
        "restoreSizeBytes": 10 * 2**30,
        "result": "ready",
    }
    assert (content["driver"], content["volumeSnapshotClassName"]) == (SLOW, "slow-retain")
    assert done.output["skipped"] == SKIPPED
    assert len(kube.list_objects(*SNAP)) == 2


@pytest.mark.usefixtures("pvcs")
def test_a_snapshot_error_is_waited_out_while_the_controller_retries(
    kube: KubeEmulator, context: Context
) -> None:
    """external-snapshotter types.go: status.error "could be helpful to upper level
    controllers ... to decide whether they should continue on waiting"; the controller
    keeps retrying and clears it on success (SnapshotController fails twice, then works)."""
    kube.add_controller(SnapshotController(failures=2, retry_seconds=0.3))
    ctx = context("backup_pvs", {**CSI, "namespaces": ["shop"]})
    polls: list[registry.Poll] = []

    def done() -> bool:
        outcome = run(ctx)
        if isinstance(outcome, registry.Poll):
            polls.append(outcome)
        return isinstance(outcome, registry.Done)

    eventually("ready after the retries", done)
    erring = [p for p in polls if "reports" in p.message]
    assert erring, "the error was seen while waiting"
    assert erring[0].message.startswith(
        "0 of 1 volume snapshots ready; the snapshot controller reports, and retries: "
        "VolumeSnapshot shop/hooksvc-7-backup-db: Failed to check and update snapshot content: "
        "failed to take snapshot of the volume vol-shop-db"
    )
    assert erring[0].output is not None
    assert erring[0].output["volumes"][0]["result"] == "error"


@pytest.mark.usefixtures("pvcs")
def test_an_error_still_there_at_the_timeout_fails_naming_the_snapshot(
    kube: KubeEmulator, context: Context
) -> None:
    kube.add_controller(SnapshotController(failures=1000, retry_seconds=0.1))
    ctx = context("backup_pvs", {**CSI, "namespaces": ["shop"]})
    eventually("the error", lambda: "reports" in getattr(run(ctx), "message", ""))
    ctx.deadline = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        "VolumeSnapshot shop/hooksvc-7-backup-db reports an error at the step's timeout "
        "(see the step's output)"
    )
    assert exc.value.output is not None
    assert "failed to take snapshot" in exc.value.output["volumes"][0]["error"]


@pytest.mark.usefixtures("pvcs")
def test_a_driver_without_one_default_class_fails_before_any_snapshot(
    kube: KubeEmulator, context: Context
) -> None:
    """snapshot_controller.go SetDefaultSnapshotClass: a driver needs exactly one default."""
    put(kube, snapshot_class("slow-too", SLOW, "Retain", default=True))
    with pytest.raises(errors.PermanentError) as exc:
        run(context("backup_pvs", CSI))
    assert exc.value.message == (
        f"2 default VolumeSnapshotClass for CSI driver {SLOW}: name one in "
        "volumeSnapshotClasses, or mark one default"
    )
    assert kube.list_objects(*SNAP) == []
    named = {**CSI, "volumeSnapshotClasses": {SLOW: "slow-too"}}
    assert isinstance(run(context("backup_pvs", named)), registry.Poll)


@pytest.mark.usefixtures("pvcs")
def test_a_named_class_applies_to_its_own_driver_only(kube: KubeEmulator, context: Context) -> None:
    run(context("backup_pvs", {**CSI, "volumeSnapshotClassName": "fast-retain"}))
    classes = {
        s["spec"]["source"]["persistentVolumeClaimName"]: s["spec"]["volumeSnapshotClassName"]
        for s in kube.list_objects(*SNAP)
    }
    assert classes == {"db": "fast-retain", "content": "slow-retain"}


def test_no_matching_pvc_is_done_with_an_empty_list(context: Context) -> None:
    assert run(context("backup_pvs", CSI)) == registry.Done(
        {"backend": "csi", "volumes": [], "skipped": []}
    )


@pytest.mark.usefixtures("pvcs")
def test_csi_before_deletion_needs_every_class_it_uses_to_retain_checked_when_it_runs(
    kube: KubeEmulator, context: Context
) -> None:
    """types.go DeletionPolicy: with Delete the storage snapshot goes with its
    VolumeSnapshot (with the cluster); only Retain outlives it."""
    registry.validate("backup_pvs", {"backend": "csi"}, hook="BeforeClusterDelete")
    with pytest.raises(errors.PermanentError) as exc:
        run(context("backup_pvs", CSI, hook="BeforeClusterDelete"))
    assert exc.value.message == (
        "VolumeSnapshotClass fast-delete has deletionPolicy Delete: on BeforeClusterDelete a "
        "snapshot must outlive the cluster, which needs a VolumeSnapshotClass with "
        "deletionPolicy Retain; the velero backend is recommended"
    )
    assert kube.list_objects(*SNAP) == [], "nothing made before the check"
    retained = {**CSI, "volumeSnapshotClasses": {FAST: "fast-retain"}}
    assert isinstance(
        run(context("backup_pvs", retained, hook="BeforeClusterDelete")), registry.Poll
    )
    assert len(kube.list_objects(*SNAP)) == 2


VELERO: dict[str, Any] = {
    "backend": "velero",
    "namespaces": ["shop"],
    "labelSelector": {"backup": "yes"},
    "ttl": "240h0m0s",
    "pollSeconds": 1,
}


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


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_velero_backs_up_the_chosen_namespaces_and_counts_their_volume_snapshots(
    kube: KubeEmulator, context: Context
) -> None:
    """velero pkg/apis/velero/v1/backup_types.go (spec, phases, csiVolumeSnapshots* counts),
    with kube_velero.VeleroServer snapshotting CSI volumes."""
    kube.add_controller(VeleroServer(volume_snapshotter="csi"))
    params = {**VELERO, "defaultVolumesToFsBackup": False, "snapshotMoveData": True}
    ctx = context("backup_pvs", params, hook="BeforeClusterDelete")
    first = run(ctx)
    assert isinstance(first, registry.Poll)
    [backup] = kube.list_objects(*BACKUP)
    assert backup["metadata"]["name"] == "hooksvc-7-backup"
    assert backup["spec"] == {
        "includedNamespaces": ["shop"],
        "labelSelector": {"matchLabels": {"backup": "yes"}},
        "snapshotVolumes": True,
        "ttl": "240h0m0s",
        "defaultVolumesToFsBackup": False,
        "snapshotMoveData": True,
    }
    # A second start finds the Backup the first one made.
    assert isinstance(run(context("backup_pvs", params, hook="BeforeClusterDelete")), registry.Poll)
    assert len(kube.list_objects(*BACKUP)) == 1
    done = finish(ctx)
    assert done.output["backup"] == {
        "namespace": "velero",
        "name": "hooksvc-7-backup",
        "phase": "Completed",
        "csiVolumeSnapshotsAttempted": 1,
        "csiVolumeSnapshotsCompleted": 1,
        "backupItemOperationsAttempted": 1,
        "backupItemOperationsCompleted": 1,
    }
    assert done.output["volumesCovered"] == 1
    assert done.output["attempts"] == [{"name": "hooksvc-7-backup", "phase": "Completed"}]


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
    kube.add_controller(VeleroServer(restarts=5))
    ctx = context("backup_pvs", {**VELERO, "backupAttempts": 2})

    def failed() -> bool:
        try:
            run(ctx)
        except errors.PermanentError as exc:
            assert exc.message == (
                "Backup velero/hooksvc-7-backup-a2 ended in phase Failed after 2 attempts: "
                + RESTART_REASON
            )
            return True
        return False

    eventually("the failure", failed)
    assert len(kube.list_objects(*BACKUP)) == 2


@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_a_completed_backup_without_its_volume_snapshots_fails_the_step(
    kube: KubeEmulator, context: Context
) -> None:
    """velero pkg/backup/item_backupper.go takePVSnapshot: a volume with no applicable
    volume snapshotter is skipped and the Backup still completes (VeleroServer with none)."""
    kube.add_controller(VeleroServer(volume_snapshotter=None))
    ctx = context("backup_pvs", VELERO)

    def failed() -> bool:
        try:
            run(ctx)
        except errors.PermanentError as exc:
            assert exc.message == (
                "Backup velero/hooksvc-7-backup completed but backed up 0 of 1 volumes "
                "(Velero skips a volume it has no snapshotter for)"
            )
            return True
        return False

    eventually("the failure", failed)
    # Without volume snapshots asked for, the same Completed passes.
    fs = context("backup_pvs", {**VELERO, "defaultVolumesToFsBackup": True}, run_id=8)
    assert finish(fs).output["volumeCheck"].startswith("not checked")


@pytest.mark.parametrize("allow", [False, True])
@pytest.mark.usefixtures("pvcs", "velero_namespace")
def test_a_partially_failed_backup_passes_only_when_the_template_allows_it(
    kube: KubeEmulator, context: Context, allow: bool
) -> None:
    """backup_types.go: PartiallyFailed, "encountered 1+ errors backing up individual
    items" (VeleroServer fails a volume snapshot)."""
    kube.add_controller(VeleroServer(failing=1))
    ctx = context("backup_pvs", {**VELERO, "allowPartiallyFailed": allow})
    if allow:
        assert finish(ctx).output["backup"]["errors"] == 1
        return

    def failed() -> bool:
        try:
            run(ctx)
        except errors.PermanentError as exc:
            assert exc.message == "Backup velero/hooksvc-7-backup ended in phase PartiallyFailed"
            assert exc.output is not None and exc.output["backup"]["errors"] == 1
            return True
        return False

    eventually("the failure", failed)


@pytest.mark.usefixtures("velero_namespace")
def test_a_backup_that_fails_validation_names_veleros_validation_errors(
    kube: KubeEmulator, context: Context
) -> None:
    """velero pkg/controller/backup_controller.go prepareBackupRequest: a storage location
    that does not exist is a validation error; FailedValidation is not retried."""
    kube.add_controller(VeleroServer())
    ctx = context("backup_pvs", {**VELERO, "storageLocation": "offsite"})

    def failed() -> bool:
        try:
            run(ctx)
        except errors.PermanentError as exc:
            assert exc.message == (
                "Backup velero/hooksvc-7-backup ended in phase FailedValidation: an existing "
                "backup storage location was not specified at backup creation time and the "
                "default offsite was not found. Please address this issue (see `velero "
                "backup-location -h` for options) and create a new backup. Error: "
                'backupstoragelocations.velero.io "offsite" not found'
            )
            return True
        return False

    eventually("the failure", failed)
    assert len(kube.list_objects(*BACKUP)) == 1


def test_velero_parameters_are_refused_with_the_csi_backend() -> None:
    with pytest.raises(registry.ParamError) as exc:
        registry.validate("backup_pvs", {"ttl": "1h"}, hook="BeforeClusterUpgrade")
    assert str(exc.value) == "ttl: applies to backend velero only"


def test_a_missing_kubeconfig_secret_is_a_temporary_error(
    kube: KubeEmulator, context: Context
) -> None:
    kube.delete_object("", "v1", "secrets", NS, f"{CLUSTER}-kubeconfig")
    with pytest.raises(errors.TemporaryError) as exc:
        run(context("backup_pvs", CSI))
    assert exc.value.message == f"kubeconfig Secret {NS}/{CLUSTER}-kubeconfig not found"


@pytest.mark.usefixtures("pvcs")
def test_an_unreachable_api_server_is_a_temporary_error_and_the_next_poll_goes_on(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = context("backup_pvs", CSI)
    run(ctx)
    kube.stop()
    with pytest.raises(k8s.Unreachable) as exc:
        run(ctx)
    assert isinstance(exc.value, errors.TemporaryError)
    assert exc.value.message == "API server unreachable"
    kube.start()
    assert isinstance(run(ctx), registry.Poll)
    assert len(kube.list_objects(*SNAP)) == 2
