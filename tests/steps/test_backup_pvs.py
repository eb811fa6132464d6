"""`backup_pvs` with CSI snapshots against the emulator, and what both backends share.

The emulator's external-snapshotter (`kube_storage.SnapshotController`) binds, errors and
readies the snapshots; the tests check which PVCs are snapshotted (Bound, CSI) with which
class (per driver), that an error is waited out, what is recorded of each snapshot, and the
Retain rule before a deletion. Also a missing kubeconfig Secret and an unreachable API
server. The velero backend: test_backup_pvs_velero.py.
"""

from __future__ import annotations

import datetime

import pytest

from tests.steps.conftest import CLUSTER, NS, Context, run
from tests.steps.pvcs import FAST, SLOW, put, put_pvcs
from tests.support.kube import KubeEmulator, eventually
from tests.support.kube_storage import SnapshotController, snapshot_class, volume
from workflows import errors
from workflows.kube import k8s
from workflows.steps import registry

SNAP = ("snapshot.storage.k8s.io", "v1", "volumesnapshots")


@pytest.fixture
def pvcs(kube: KubeEmulator) -> None:
    put_pvcs(kube)


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
    assert first.after == 5
    assert first.message.startswith("0 of 2 volume snapshots ready"), "maybe cut already"
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
        "VolumeSnapshot shop/hooksvc-7-backup-db: Failed to create snapshot: "
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
def test_a_cut_snapshot_still_uploading_waits_without_its_stale_error(
    kube: KubeEmulator, context: Context
) -> None:
    """kubernetes-csi/external-snapshotter (master afb2f0d8) sidecar-controller
    snapshot_controller.go updateSnapshotContentStatus clears a failed attempt's error only
    when readyToUse turns true: a snapshot cut (creationTime) and still uploading keeps it.
    It was reported as the reason the step waits, and at the timeout as "reports an error"."""
    kube.add_controller(SnapshotController(failures=1, retry_seconds=0.1, ready_after=60))
    ctx = context("backup_pvs", {**CSI, "namespaces": ["shop"]})
    eventually("the cut", lambda: "cut" in getattr(run(ctx), "message", ""))
    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll) and waiting.output is not None
    assert waiting.message == "0 of 1 volume snapshots ready, 1 cut and not yet ready to use"
    assert waiting.output["volumes"][0]["result"] == "cut"
    [stored] = kube.list_objects(*SNAP)
    assert "error" in stored["status"], "the sidecar kept it"
    ctx.deadline = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        "VolumeSnapshot shop/hooksvc-7-backup-db was cut but is not ready to use at the step's "
        "timeout (see the step's output)"
    )


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


def test_a_namespace_pattern_snapshots_the_volumes_of_the_namespaces_it_matches(
    kube: KubeEmulator, context: Context
) -> None:
    """The namespaces of `backup_pvs` are read as Velero 1.18 reads includedNamespaces
    (vmware-tanzu/velero main d30d389b pkg/util/wildcard/expand.go: `*`, `?`, `[...]` are
    glob patterns matched against the live namespaces), so one template backs up the same
    volumes with either backend. Read as a name, `app-*` found no PVC and the step was Done
    with no snapshot."""
    for name in ("app-1", "app-2", "other"):
        put(kube, *volume(name, "data", driver=FAST, labels={"backup": "yes"}))
    put(kube, snapshot_class("fast-retain", FAST, "Retain", default=True))
    kube.add_controller(SnapshotController())
    run(context("backup_pvs", {**CSI, "namespaces": ["app-*"]}))
    snapshots = kube.list_objects(*SNAP)
    assert [s["metadata"]["namespace"] for s in snapshots] == ["app-1", "app-2"]


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
