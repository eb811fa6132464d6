"""`backup_pvs` against the emulator: CSI snapshots and Velero backups in the workload cluster.

The test plays the snapshot controller and Velero (marks snapshots ready or failed, sets a
Backup's phase) and checks what the step created, field by field, and that starting twice
creates nothing twice. Failure paths: a snapshot's error, a failed or partially failed
backup, a VolumeSnapshotClass that would not outlive a deleted cluster, a missing
kubeconfig Secret, an unreachable API server.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.steps.conftest import CLUSTER, NS, Context, run
from tests.support.kube import KubeEmulator
from workflows import errors, k8s
from workflows.steps import registry

SNAP = ("snapshot.storage.k8s.io", "v1", "volumesnapshots")
BACKUP = ("velero.io", "v1", "backups")


def put_pvc(kube: KubeEmulator, namespace: str, name: str, **labels: str) -> None:
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce"]},
        }
    )


def put_snapshot_class(kube: KubeEmulator, name: str, policy: str) -> None:
    kube.put_object(
        {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshotClass",
            "metadata": {"name": name},
            "driver": "csi.example.com",
            "deletionPolicy": policy,
        }
    )


@pytest.fixture
def pvcs(kube: KubeEmulator) -> None:
    put_pvc(kube, "shop", "db", backup="yes")
    put_pvc(kube, "shop", "cache")
    put_pvc(kube, "blog", "content", backup="yes")
    put_pvc(kube, "other", "data", backup="yes")


CSI = {
    "namespaces": ["shop", "blog"],
    "labelSelector": {"backup": "yes"},
    "volumeSnapshotClassName": "retained",
    "pollSeconds": 5,
}


@pytest.mark.usefixtures("pvcs")
def test_csi_snapshots_each_chosen_pvc_and_is_done_when_all_are_ready(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = context("backup_pvs", CSI)
    first = run(ctx)
    assert isinstance(first, registry.Poll)
    assert (first.after, first.message) == (5, "0 of 2 volume snapshots ready")
    snapshots = kube.list_objects(*SNAP)
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in snapshots] == [
        ("blog", "hooksvc-7-backup-content"),
        ("shop", "hooksvc-7-backup-db"),
    ]
    db = snapshots[1]
    assert db["metadata"]["labels"] == {"hooksvc.io/run": "7", "hooksvc.io/step": "backup"}
    assert db["spec"] == {
        "source": {"persistentVolumeClaimName": "db"},
        "volumeSnapshotClassName": "retained",
    }
    # A second start (a redelivered message, memo lost) finds what the first one made.
    again = context("backup_pvs", CSI)
    assert isinstance(run(again), registry.Poll)
    assert len(kube.list_objects(*SNAP)) == 2
    assert again.memo == ctx.memo
    kube.set_status(*SNAP, "shop", "hooksvc-7-backup-db", {"readyToUse": True})
    second = run(ctx)
    assert isinstance(second, registry.Poll)
    assert second.message == "1 of 2 volume snapshots ready"
    kube.set_status(
        *SNAP,
        "blog",
        "hooksvc-7-backup-content",
        {
            "readyToUse": True,
            "restoreSize": "1Gi",
            "boundVolumeSnapshotContentName": "snapcontent-1",
        },
    )
    done = run(ctx)
    assert done == registry.Done(
        {
            "backend": "csi",
            "volumes": [
                {
                    "namespace": "blog",
                    "persistentVolumeClaim": "content",
                    "volumeSnapshot": "hooksvc-7-backup-content",
                    "readyToUse": True,
                    "volumeSnapshotContent": "snapcontent-1",
                    "restoreSize": "1Gi",
                    "result": "ready",
                },
                {
                    "namespace": "shop",
                    "persistentVolumeClaim": "db",
                    "volumeSnapshot": "hooksvc-7-backup-db",
                    "readyToUse": True,
                    "result": "ready",
                },
            ],
        }
    )
    assert len(kube.list_objects(*SNAP)) == 2


@pytest.mark.usefixtures("pvcs")
def test_csi_without_namespaces_or_class_snapshots_every_pvc_with_the_default_class(
    kube: KubeEmulator, context: Context
) -> None:
    run(context("backup_pvs"))
    snapshots = kube.list_objects(*SNAP)
    assert len(snapshots) == 4
    assert all("volumeSnapshotClassName" not in s["spec"] for s in snapshots)


@pytest.mark.usefixtures("pvcs")
def test_a_snapshot_error_fails_the_step_naming_the_snapshot(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = context("backup_pvs", CSI)
    run(ctx)
    kube.set_status(
        *SNAP,
        "shop",
        "hooksvc-7-backup-db",
        {"readyToUse": False, "error": {"message": "rpc error: quota exceeded at 10:42:01"}},
    )
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert (
        exc.value.message == "VolumeSnapshot shop/hooksvc-7-backup-db failed (see its status.error)"
    )
    assert exc.value.output is not None
    assert [v["result"] for v in exc.value.output["volumes"]] == ["pending", "failed"]


def test_no_matching_pvc_is_done_with_an_empty_list(context: Context) -> None:
    assert run(context("backup_pvs", CSI)) == registry.Done({"backend": "csi", "volumes": []})


def test_csi_before_deletion_needs_a_named_class_when_applied(context: Context) -> None:
    with pytest.raises(registry.ParamError) as exc:
        registry.validate("backup_pvs", {"backend": "csi"}, hook="BeforeClusterDelete")
    assert str(exc.value) == (
        "volumeSnapshotClassName: is required: on BeforeClusterDelete a snapshot must outlive "
        "the cluster, which needs a VolumeSnapshotClass with deletionPolicy Retain; "
        "the velero backend is recommended"
    )
    # Velero, and csi before other hooks, need no class.
    registry.validate("backup_pvs", {"backend": "velero"}, hook="BeforeClusterDelete")
    registry.validate("backup_pvs", {"backend": "csi"}, hook="BeforeClusterUpgrade")


@pytest.mark.usefixtures("pvcs")
def test_csi_before_deletion_refuses_a_class_that_deletes_its_snapshots(
    kube: KubeEmulator, context: Context
) -> None:
    put_snapshot_class(kube, "retained", "Delete")
    ctx = context("backup_pvs", CSI, hook="BeforeClusterDelete")
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        "VolumeSnapshotClass retained has deletionPolicy Delete: on BeforeClusterDelete a "
        "snapshot must outlive the cluster, which needs a VolumeSnapshotClass with "
        "deletionPolicy Retain; the velero backend is recommended"
    )
    assert kube.list_objects(*SNAP) == []
    put_snapshot_class(kube, "retained", "Retain")
    assert isinstance(run(context("backup_pvs", CSI, hook="BeforeClusterDelete")), registry.Poll)
    assert len(kube.list_objects(*SNAP)) == 2


VELERO: dict[str, Any] = {
    "backend": "velero",
    "namespaces": ["shop"],
    "labelSelector": {"backup": "yes"},
    "ttl": "240h0m0s",
    "snapshotVolumes": False,
}


def test_velero_creates_one_backup_and_is_done_when_it_completes(
    kube: KubeEmulator, context: Context
) -> None:
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "velero"}})
    ctx = context("backup_pvs", VELERO, hook="BeforeClusterDelete")
    first = run(ctx)
    assert isinstance(first, registry.Poll)
    assert first.message == "Backup velero/hooksvc-7-backup is New"
    assert isinstance(run(context("backup_pvs", VELERO, hook="BeforeClusterDelete")), registry.Poll)
    [backup] = kube.list_objects(*BACKUP)
    assert backup["metadata"]["name"] == "hooksvc-7-backup"
    assert backup["metadata"]["namespace"] == "velero"
    assert backup["spec"] == {
        "includedNamespaces": ["shop"],
        "labelSelector": {"matchLabels": {"backup": "yes"}},
        "snapshotVolumes": False,
        "ttl": "240h0m0s",
    }
    kube.set_status(*BACKUP, "velero", "hooksvc-7-backup", {"phase": "InProgress"})
    assert run(ctx) == registry.Poll(
        after=10,
        message="Backup velero/hooksvc-7-backup is InProgress",
        output={
            "backend": "velero",
            "backup": {"namespace": "velero", "name": "hooksvc-7-backup", "phase": "InProgress"},
        },
    )
    kube.set_status(*BACKUP, "velero", "hooksvc-7-backup", {"phase": "Completed", "warnings": 1})
    assert run(ctx) == registry.Done(
        {
            "backend": "velero",
            "backup": {
                "namespace": "velero",
                "name": "hooksvc-7-backup",
                "phase": "Completed",
                "warnings": 1,
            },
        }
    )


@pytest.mark.parametrize(
    ("phase", "allow", "fails"),
    [("Failed", True, True), ("PartiallyFailed", False, True), ("PartiallyFailed", True, False)],
)
def test_a_failed_backup_fails_and_a_partially_failed_one_unless_allowed(
    kube: KubeEmulator, context: Context, phase: str, allow: bool, fails: bool
) -> None:
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "velero"}})
    ctx = context("backup_pvs", {**VELERO, "allowPartiallyFailed": allow})
    run(ctx)
    kube.set_status(*BACKUP, "velero", "hooksvc-7-backup", {"phase": phase, "errors": 2})
    if not fails:
        assert isinstance(run(ctx), registry.Done)
        return
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == f"Backup velero/hooksvc-7-backup ended in phase {phase}"
    assert exc.value.output is not None
    assert exc.value.output["backup"]["errors"] == 2


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
