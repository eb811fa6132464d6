"""A Kubernetes step through the real worker: backup_pvs holds the hook until snapshots are ready.

CAPI calls the hook over HTTPS; the worker (its management cluster is the emulator, through
HOOKSVC_KUBECONFIG) reads the workload kubeconfig Secret, snapshots the PVC and polls; the
test plays the snapshot controller; the run's start and success end up as Events on the
Cluster. Velero's Backups: a restart mid-backup, a storage location unavailable at first, and a
namespace pattern whose volumes Velero skipped.
A conformance step cancelled by an operator, or by `onDeadline: Fail`, has its
Namespace and ClusterRoleBinding deleted by the worker's cleanup task.

(Named to run after test_outages.py: that module expects no worker to be running yet.)
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.steps.conftest import CLUSTER, CLUSTER_UID, NS, put_kubeconfig_secret
from tests.support import capi, servers
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator
from tests.support.kube_storage import SnapshotController, snapshot_class, volume
from tests.support.kube_velero import VeleroServer, storage_location
from tests.support.worker import Worker
from workflows import clock
from workflows.engine import dispatch, transitions
from workflows.models import Run, RunEvent
from workflows.operators import actions

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HOOK = "BeforeClusterUpgrade"
SNAP = ("snapshot.storage.k8s.io", "v1", "volumesnapshots")
RBAC = ("rbac.authorization.k8s.io", "v1", "clusterrolebindings")


def call_hook(server: servers.HookServer) -> dict[str, Any]:
    cluster = capi.cluster_v1beta2(name=CLUSTER, namespace=NS, uid=CLUSTER_UID)
    status, body = server.post(capi.hook_path(HOOK), capi.hook_request(HOOK, cluster))
    assert status == 200, body
    return body


def wait_for(what: str, predicate: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(0.2)


def backup_setup(kube: KubeEmulator, **step: Any) -> None:
    """A workload cluster with one Bound CSI volume in `shop`, and a template that snapshots it."""
    for ns in (NS, "shop"):
        kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    put_kubeconfig_secret(kube)
    for obj in volume("shop", "db"):
        kube.put_object(obj)
    kube.put_object(snapshot_class("csi", "csi.example.com", "Retain", default=True))
    snapshot = {
        "name": "snapshot",
        "type": "backup_pvs",
        "with": {"namespaces": ["shop"], "pollSeconds": 1},
    }
    wf.template("backup-before-upgrade", retryAfterSeconds=1, steps=[{**snapshot, **step}])


def test_a_backup_run_holds_the_hook_until_snapshots_are_ready_and_tells_the_cluster(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator
) -> None:
    """kubernetes-csi/external-snapshotter client/apis/volumesnapshot/v1/types.go: a
    snapshot's status.error is not final, the controller retries and clears it. The
    emulator's SnapshotController fails twice, then succeeds; the worker keeps polling with
    the error in the step's message and the hook held, then lets the upgrade go on."""
    kube.add_controller(SnapshotController(failures=2, retry_seconds=1))
    backup_setup(kube)
    first = call_hook(hook_server)
    assert (first["status"], first["retryAfterSeconds"]) == ("Success", 1)
    wait_for("the snapshot", lambda: kube.list_objects(*SNAP, "shop"))
    run = Run.objects.get()
    name = f"hooksvc-{run.pk}-snapshot-db"
    assert [s["metadata"]["name"] for s in kube.list_objects(*SNAP, "shop")] == [name]
    wait_for(
        "the error in the step's message",
        lambda: "the snapshot controller reports" in run.steps.get().message,
    )
    held = call_hook(hook_server)
    assert held["retryAfterSeconds"] == 1
    assert held["message"] == "workflow backup-before-upgrade is running step snapshot"
    wait_for("the hook to proceed", lambda: call_hook(hook_server)["retryAfterSeconds"] == 0)
    run.refresh_from_db()
    assert run.state == "succeeded"
    assert run.steps.get().output["volumes"][0]["result"] == "ready"

    def reasons() -> list[str]:
        return sorted(
            e["reason"]
            for e in kube.list_objects("", "v1", "events", NS)
            if e["involvedObject"]["name"] == CLUSTER
        )

    wait_for(
        "both events", lambda: reasons() == ["HooksvcWorkflowStarted", "HooksvcWorkflowSucceeded"]
    )
    messages = sorted(e["message"] for e in kube.list_objects("", "v1", "events", NS))
    assert messages == [
        "workflow backup-before-upgrade started for BeforeClusterUpgrade v1.33.0",
        "workflow backup-before-upgrade succeeded for BeforeClusterUpgrade v1.33.0",
    ]


def test_an_api_server_that_fails_and_goes_down_delays_the_run_but_nothing_happens_twice(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator
) -> None:
    """Fault: the Kubernetes API answers 500s and 429s, then is down for a while.

    The 500s say nothing of when to come back: the engine's backoff spaces the attempts. The
    429s carry Retry-After, as priority and fairness sends it, and the engine waits that long.
    Each retry is in the run's history. The outage ends once the worker has met it twice, not
    after a fixed time, which on a loaded machine could pass before the worker tried at all."""
    backup_setup(kube, retries=30)
    # The hintless 500s first: as the 3rd and 4th failures in a row their backoff could reach
    # 8 and 16 s (the test once took 58 s); a 429 waits its Retry-After wherever it comes.
    kube.fail_next("GET", r"persistentvolumeclaims", 500, times=2)
    kube.throttle_next("POST", r"volumesnapshots", retry_after="1", times=2)
    answers = [call_hook(hook_server)]
    wait_for("the snapshot", lambda: kube.list_objects(*SNAP, "shop"))
    run = Run.objects.get()
    name = f"hooksvc-{run.pk}-snapshot-db"

    def retried() -> list[str]:
        events = RunEvent.objects.filter(run=run, name=transitions.RETRY).order_by("id")
        return [e.details["error"] for e in events]

    before_outage = len(retried())
    kube.stop()
    down_at = time.monotonic()
    deadline = down_at + 60
    while len(retried()) < before_outage + 2:
        assert time.monotonic() < deadline, f"the worker did not meet the outage: {retried()}"
        answers.append(call_hook(hook_server))
        time.sleep(0.2)
    kube.start()
    kube.add_controller(SnapshotController())  # starts after the outage, and catches up
    while answers[-1]["retryAfterSeconds"] != 0:
        assert time.monotonic() < deadline, answers[-1]
        time.sleep(0.2)
        answers.append(call_hook(hook_server))
    print(f"recovered from a Kubernetes API outage in {time.monotonic() - down_at:.1f} s")
    run.refresh_from_db()
    assert run.state == "succeeded"
    assert all(a["status"] == "Success" for a in answers)
    assert all(a["retryAfterSeconds"] == 1 for a in answers[:-1]), "held until the run finished"
    assert [s["metadata"]["name"] for s in kube.list_objects(*SNAP, "shop")] == [name], (
        "one snapshot"
    )
    errors = retried()
    assert errors[:4] == [
        "PersistentVolumeClaims in shop: API server answered 500 Internal Server Error",
        "PersistentVolumeClaims in shop: API server answered 500 Internal Server Error",
        f"VolumeSnapshot shop/{name}: API server answered 429 Too Many Requests",
        f"VolumeSnapshot shop/{name}: API server answered 429 Too Many Requests",
    ], "the 500s and 429s were retried"
    assert errors[4:] and all(e.endswith("API server unreachable") for e in errors[4:]), errors


def velero_setup(kube: KubeEmulator, namespaces: tuple[str, ...] = ("shop",)) -> None:
    """backup_setup's cluster with Velero's namespace, and a template that backs up with
    Velero before a deletion."""
    backup_setup(kube)
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "velero"}})
    step = {
        "name": "backup",
        "type": "backup_pvs",
        "with": {"backend": "velero", "namespaces": list(namespaces), "pollSeconds": 1},
    }
    wf.template(
        "backup-before-delete", hook="BeforeClusterDelete", retryAfterSeconds=1, steps=[step]
    )


def call_delete(server: servers.HookServer) -> dict[str, Any]:
    cluster = capi.cluster_v1beta2(name=CLUSTER, namespace=NS, uid=CLUSTER_UID)
    hook = "BeforeClusterDelete"
    status, body = server.post(capi.hook_path(hook), capi.hook_request(hook, cluster))
    assert status == 200, body
    return body


def test_a_velero_restart_mid_backup_is_met_with_a_new_backup_and_the_hook_holds_until_it_ends(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator
) -> None:
    """vmware-tanzu/velero pkg/cmd/server/server.go markInProgressBackupsFailed: a restarted
    Velero marks the InProgress Backup Failed and never resumes it. The emulator's Velero
    restarts during the first Backup; the worker starts a second one and holds the deletion
    until it completes with its volume snapshotted."""
    velero_setup(kube)
    kube.add_controller(VeleroServer(restarts=1, duration=2))
    assert call_delete(hook_server)["retryAfterSeconds"] == 1
    wait_for("the second backup", lambda: len(kube.list_objects("velero.io", "v1", "backups")) == 2)
    assert call_delete(hook_server)["retryAfterSeconds"] == 1, "held while the second backup runs"
    wait_for("the deletion to proceed", lambda: call_delete(hook_server)["retryAfterSeconds"] == 0)
    run = Run.objects.get()
    assert run.state == "succeeded"
    output = run.steps.get().output
    assert [a["phase"] for a in output["attempts"]] == ["Failed", "Completed"]
    assert output["backup"]["csiVolumeSnapshotsCompleted"] == 1


def test_a_storage_location_unavailable_at_first_holds_the_deletion_until_a_new_backup_ends(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator
) -> None:
    """vmware-tanzu/velero (main d30d389b) pkg/controller/backup_controller.go
    prepareBackupRequest: a BackupStorageLocation not Available fails the Backup's
    validation ("... is in Unavailable status."); backup_storage_location_controller.go sets
    it Available at its next validation. Through the worker, whose memo carries the
    attempts: the deletion is held, no second Backup is made while the location is
    Unavailable, one is once it is Available, and the deletion proceeds when it completes."""
    velero_setup(kube)
    kube.put_object(storage_location("default", phase="Unavailable", default=True))
    kube.add_controller(VeleroServer(duration=0.5))
    assert call_delete(hook_server)["retryAfterSeconds"] == 1
    wait_for(
        "the wait for the location",
        lambda: (
            Run.objects.get()
            .steps.filter(message__contains="waiting for BackupStorageLocation velero/default")
            .exists()
        ),
    )
    assert call_delete(hook_server)["retryAfterSeconds"] == 1, "held"

    def location_reads() -> int:
        return sum(1 for _, path in kube.requests if "/backupstoragelocations/default" in path)

    wait_for("three reads of the location by the worker", lambda: location_reads() >= 3)
    assert len(kube.list_objects("velero.io", "v1", "backups")) == 1
    kube.set_status("velero.io", "v1", "backupstoragelocations", "velero", "default",
                    {"phase": "Available", "message": None})  # fmt: skip
    wait_for("the deletion to proceed", lambda: call_delete(hook_server)["retryAfterSeconds"] == 0)
    run = Run.objects.get()
    assert run.state == "succeeded"
    output = run.steps.get().output
    assert [a["phase"] for a in output["attempts"]] == ["FailedValidation", "Completed"]
    assert len(kube.list_objects("velero.io", "v1", "backups")) == 2


def test_a_backup_of_a_namespace_pattern_that_skipped_every_volume_holds_the_deletion(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator
) -> None:
    """vmware-tanzu/velero v1.18.1 pkg/util/wildcard/expand.go: `sho*` is expanded against
    the live namespaces (shop), the spec keeps `sho*`; pkg/backup/item_backupper.go skips a
    volume no snapshotter applies to and the Backup still completes. Read as a namespace's
    name, `sho*` covered "0 of 0" volumes and the deletion went on without a backup."""
    velero_setup(kube, namespaces=("sho*",))
    kube.add_controller(VeleroServer(volume_snapshotter=None, duration=0.5))
    assert call_delete(hook_server)["retryAfterSeconds"] == 1
    wait_for("the run to fail", lambda: Run.objects.get().state == "failed")
    step = Run.objects.get().steps.get()
    assert step.message.endswith("completed but backed up 0 of 1 volume (Velero skips a volume "
                                 "it has no snapshotter for)"), step.message  # fmt: skip
    answer = call_delete(hook_server)
    assert answer["retryAfterSeconds"] > 0, f"the deletion must stay held: {answer}"


def conformance_setup(kube: KubeEmulator, **spec_fields: Any) -> None:
    """A workload cluster and a template whose conformance step polls every second."""
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    put_kubeconfig_secret(kube)
    step = {"name": "conformance", "type": "conformance", "with": {"pollSeconds": 1}}
    # A second conformance step that never starts: only a started step is cleaned up.
    later = {**step, "name": "again", "dependsOn": ["conformance"]}
    wf.template(
        "conformance-before-upgrade", retryAfterSeconds=1, steps=[step, later], **spec_fields
    )


def running_conformance(hook_server: servers.HookServer, kube: KubeEmulator) -> tuple[Run, str]:
    call_hook(hook_server)
    run = Run.objects.get()
    name = f"hooksvc-{run.pk}-conformance"
    wait_for(
        "the step to poll", lambda: run.steps.filter(name="conformance", state="waiting").exists()
    )
    assert kube.get_object("", "v1", "pods", name, "e2e-conformance") is not None
    assert kube.get_object(*RBAC, None, name) is not None
    return run, name


def cleaned_up(kube: KubeEmulator, run: Run, name: str) -> None:
    wait_for(
        "the Namespace deleted", lambda: not kube.get_object("", "v1", "namespaces", None, name)
    )
    assert kube.get_object(*RBAC, None, name) is None
    wait_for("the cleanup event", lambda: RunEvent.objects.filter(run=run, name="cleanup").exists())
    events = RunEvent.objects.filter(run=run, name="cleanup")
    assert [(e.step_name, e.actor, e.message) for e in events] == [
        ("conformance", "hooksvc", "cleanup of cancelled step conformance ran")
    ]


def test_cancelling_a_running_conformance_step_deletes_what_it_created(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator
) -> None:
    conformance_setup(kube)
    run, name = running_conformance(hook_server, kube)
    actions.run_cancel(run_id=run.pk, actor="alice", reason="the upgrade window closed")
    cleaned_up(kube, run, name)
    assert sorted(run.steps.values_list("name", "state")) == [
        ("again", "cancelled"),
        ("conformance", "cancelled"),
    ]


def test_a_run_failed_by_its_deadline_cleans_up_its_conformance_step(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator
) -> None:
    conformance_setup(kube, deadlineSeconds=3600, onDeadline="Fail")
    run, name = running_conformance(hook_server, kube)
    # The deadline passes: the worker acts on it at the run's next wake-up.
    Run.objects.filter(pk=run.pk).update(deadline_at=clock.now())
    dispatch.advance([run.pk])
    cleaned_up(kube, run, name)
    run.refresh_from_db()
    assert run.state == "failed"


def test_a_cleanup_that_meets_a_failing_api_server_is_retried_by_the_worker(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator
) -> None:
    conformance_setup(kube)
    run, name = running_conformance(hook_server, kube)
    kube.fail_next("DELETE", "/clusterrolebindings/", 503)
    actions.run_cancel(run_id=run.pk, actor="alice", reason="the upgrade window closed")
    cleaned_up(kube, run, name)
    deletes = [p for m, p in kube.requests if m == "DELETE" and "/clusterrolebindings/" in p]
    assert len(deletes) >= 2, "the first attempt met the 503 and the task was sent again"
