"""A Kubernetes step through the real worker: backup_pvs holds the hook until snapshots are ready.

CAPI calls the hook over HTTPS; the worker (its management cluster is the emulator, through
HOOKSVC_KUBECONFIG) reads the workload kubeconfig Secret, snapshots the PVC and polls; the
test plays the snapshot controller; the run's start and success end up as Events on the
Cluster.

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
from tests.support.worker import Worker
from workflows.models import Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HOOK = "BeforeClusterUpgrade"
SNAP = ("snapshot.storage.k8s.io", "v1", "volumesnapshots")


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
    """A workload cluster with one PVC in `shop`, and a template that snapshots it."""
    for ns in (NS, "shop"):
        kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    put_kubeconfig_secret(kube)
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "db", "namespace": "shop"},
        }
    )
    snapshot = {
        "name": "snapshot",
        "type": "backup_pvs",
        "with": {"namespaces": ["shop"], "pollSeconds": 1},
    }
    wf.template("backup-before-upgrade", retryAfterSeconds=1, steps=[{**snapshot, **step}])


def test_a_backup_run_holds_the_hook_until_snapshots_are_ready_and_tells_the_cluster(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator
) -> None:
    backup_setup(kube)
    first = call_hook(hook_server)
    assert (first["status"], first["retryAfterSeconds"]) == ("Success", 1)
    wait_for("the snapshot", lambda: kube.list_objects(*SNAP, "shop"))
    run = Run.objects.get()
    name = f"hooksvc-{run.pk}-snapshot-db"
    assert [s["metadata"]["name"] for s in kube.list_objects(*SNAP, "shop")] == [name]
    held = call_hook(hook_server)
    assert held["retryAfterSeconds"] == 1
    assert held["message"] == "workflow backup-before-upgrade is running step snapshot"
    kube.set_status(*SNAP, "shop", name, {"readyToUse": True})
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
    """Fault: the Kubernetes API answers 500s and 429s, then is down for a while."""
    backup_setup(kube, retries=30)
    kube.fail_next("POST", r"volumesnapshots", 500, times=2)
    kube.fail_next("GET", r"persistentvolumeclaims", 429, times=2)
    answers = [call_hook(hook_server)]
    wait_for("the snapshot", lambda: kube.list_objects(*SNAP, "shop"), timeout=90)
    kube.stop()
    down_at = time.monotonic()
    for _ in range(5):
        answers.append(call_hook(hook_server))
        time.sleep(0.5)
    kube.start()
    run = Run.objects.get()
    name = f"hooksvc-{run.pk}-snapshot-db"
    kube.set_status(*SNAP, "shop", name, {"readyToUse": True})
    deadline = time.monotonic() + 90
    while answers[-1]["retryAfterSeconds"] != 0:
        assert time.monotonic() < deadline, answers[-1]
        time.sleep(0.3)
        answers.append(call_hook(hook_server))
    print(f"recovered from a Kubernetes API outage in {time.monotonic() - down_at:.1f} s")
    run.refresh_from_db()
    assert run.state == "succeeded"
    assert all(a["status"] == "Success" for a in answers)
    assert all(a["retryAfterSeconds"] == 1 for a in answers[:-1]), "held until the run finished"
    assert [s["metadata"]["name"] for s in kube.list_objects(*SNAP, "shop")] == [name], (
        "one snapshot"
    )
    assert run.steps.get().failures >= 2, "the 500s and 429s were retried"
