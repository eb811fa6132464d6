"""`node_drain` and `node_uncordon` against the emulator's Nodes, Pods, PodDisruptionBudgets
and eviction subresource (tests/support/kube_eviction.py).

What kubectl drain (kubernetes 121817a5 `staging/src/k8s.io/kubectl/pkg/drain/filters.go`)
and CAPI's Machine controller (cluster-api 03c3f0c2 `internal/controllers/machine/drain/
drain.go`, `filters.go`) do, as a user checks it: the Node is cordoned; its Pods are evicted
except mirror Pods and the running Pods of an existing DaemonSet (a finished one is
evicted); a budget's 429 (pkg/registry/core/pod/storage/eviction.go `checkAndDecrement`) is
waited out, not a failure; a Pod in its grace period is waited for; the step's timeout ends
the wait with a message naming what is left. The Node comes from `with.node`, or the run's
Machine (its `status.nodeRef`, in the context or read from the management cluster); an
unknown Node or none at all is a permanent error that says so.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.steps.conftest import Context, run
from tests.support.kube import KubeEmulator
from tests.support.kube_workloads import node
from workflows import clock, errors
from workflows.steps import registry

PODS = ("", "v1", "pods")
NODES = ("", "v1", "nodes")
PDBS = ("policy", "v1", "poddisruptionbudgets")


def owner(kube: KubeEmulator, kind: str, name: str) -> dict[str, Any]:
    """A controller the garbage collector finds (it deletes Pods whose owner is gone)."""
    plural = {"DaemonSet": "daemonsets", "StatefulSet": "statefulsets"}[kind]
    made = kube.put_object(
        {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": "default"}}
    )
    assert kube.get_object("apps", "v1", plural, "default", name) is not None
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": name,
        "uid": made["metadata"]["uid"],
        "controller": True,
    }


def pod(
    name: str,
    *,
    on: str = "worker-1",
    owned_by: dict[str, Any] | None = None,
    grace: int = 0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels or {}}
    if annotations:
        meta["annotations"] = annotations
    if owned_by:
        meta["ownerReferences"] = [owned_by]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": on,
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "c", "image": "web:1"}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.fixture(autouse=True)
def nodes(kube: KubeEmulator) -> None:
    kube.put_object(node("worker-1"))
    kube.put_object(node("worker-2"))


def names(kube: KubeEmulator) -> list[str]:
    return sorted(p["metadata"]["name"] for p in kube.list_objects(*PODS, "default"))


def unschedulable(kube: KubeEmulator, name: str = "worker-1") -> bool:
    found = kube.get_object(*NODES, None, name)
    assert found is not None
    return bool(found["spec"].get("unschedulable"))


def test_it_cordons_the_node_and_evicts_all_but_daemonset_and_mirror_pods(
    kube: KubeEmulator, context: Context
) -> None:
    """filters.go `daemonSetFilter` (a running Pod of an existing DaemonSet is skipped, a
    finished one evicted), `mirrorPodFilter` (annotation kubernetes.io/config.mirror); Pods
    on other Nodes stay."""
    web, logs = owner(kube, "StatefulSet", "web"), owner(kube, "DaemonSet", "logs")
    kube.put_object(pod("web-1", owned_by=web))
    kube.put_object(pod("logs-1", owned_by=logs))
    kube.put_object({**pod("done-1", owned_by=logs), "status": {"phase": "Succeeded"}})
    kube.put_object(pod("etcd-worker-1", annotations={"kubernetes.io/config.mirror": "x"}))
    kube.put_object(pod("web-2", on="worker-2", owned_by=web))
    ctx = context("node_drain", {"node": "worker-1"}, hook="UpdateMachine", step_name="drain")

    first = run(ctx)
    assert isinstance(first, registry.Poll)
    assert unschedulable(kube) and not unschedulable(kube, "worker-2")
    assert names(kube) == ["etcd-worker-1", "logs-1", "web-2"]

    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert done.output["node"] == "worker-1"
    assert done.output["evicted"] == ["default/done-1", "default/web-1"]
    assert done.output["skipped"] == [
        "default/etcd-worker-1 (mirror Pod)",
        "default/logs-1 (DaemonSet Pod)",
    ]


def test_a_budget_that_allows_no_disruption_is_waited_out_not_a_failure(
    kube: KubeEmulator, context: Context
) -> None:
    """eviction.go `checkAndDecrement`: 429 at disruptionsAllowed 0; CAPI's EvictPods keeps
    such a Pod for its next reconcile. Once the budget allows one, the Pod is evicted."""
    kube.put_object(pod("db-0", owned_by=owner(kube, "StatefulSet", "db"), labels={"app": "db"}))
    kube.put_object(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db", "namespace": "default", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "minAvailable": 1},
        }
    )
    blocked = {
        "observedGeneration": 1,
        "disruptionsAllowed": 0,
        "currentHealthy": 1,
        "desiredHealthy": 1,
    }
    kube.set_status(*PDBS, "default", "db", blocked)
    ctx = context("node_drain", {"node": "worker-1", "pollSeconds": 5}, hook="UpdateMachine")

    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert waiting.after == 5
    assert waiting.message == (
        "Node worker-1 is draining: 1 Pods left; 1 refused eviction (default/db-0)"
    )
    assert waiting.output is not None
    assert waiting.output["refused"] == [
        "default/db-0: its PodDisruptionBudget allows no disruption now"
    ]
    assert names(kube) == ["db-0"]

    kube.set_status(*PDBS, "default", "db", {"disruptionsAllowed": 1, "currentHealthy": 2})
    assert isinstance(run(ctx), registry.Poll)
    assert names(kube) == []
    assert isinstance(run(ctx), registry.Done)


def test_a_pod_in_its_grace_period_is_waited_for_and_not_evicted_again(
    kube: KubeEmulator, context: Context
) -> None:
    """An evicted Pod is deleted gracefully (its kubelet ends it); CAPI counts it among
    `PodsDeletionTimestampSet` until it is gone, and the drain is not complete before."""
    kube.put_object(pod("web-1", owned_by=owner(kube, "StatefulSet", "web"), grace=30))
    ctx = context("node_drain", {"node": "worker-1"}, hook="UpdateMachine")
    assert isinstance(run(ctx), registry.Poll)
    terminating = kube.get_object(*PODS, "default", "web-1")
    assert terminating is not None and terminating["metadata"]["deletionTimestamp"]
    still = run(ctx)
    assert isinstance(still, registry.Poll)
    assert still.message == "Node worker-1 is draining: 1 Pods left"

    kube.delete_object(*PODS, "default", "web-1")  # the kubelet ended it
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert done.output["evicted"] == ["default/web-1"]


def test_at_its_timeout_the_drain_fails_naming_the_pods_left(
    kube: KubeEmulator, context: Context
) -> None:
    kube.put_object(pod("web-1", owned_by=owner(kube, "StatefulSet", "web"), grace=30))
    ctx = context("node_drain", {"node": "worker-1"}, hook="UpdateMachine")
    ctx.deadline = clock.now() + datetime.timedelta(seconds=1)
    with pytest.raises(errors.PermanentError) as raised:
        run(ctx)
    assert str(raised.value) == (
        "Node worker-1 was not drained within the step's timeout: 1 Pods left (default/web-1)"
    )


def test_an_unknown_node_is_a_permanent_error_naming_the_cluster(context: Context) -> None:
    ctx = context("node_drain", {"node": "worker-9"}, hook="UpdateMachine")
    with pytest.raises(
        errors.PermanentError,
        match=r"^Node worker-9 does not exist in the workload cluster fleet/prod-eu-1$",
    ):
        run(ctx)


def test_without_a_node_or_a_machine_the_step_says_what_it_needs(context: Context) -> None:
    ctx = context("node_drain", {}, step_name="drain")
    with pytest.raises(errors.PermanentError) as raised:
        run(ctx)
    assert str(raised.value) == (
        "step drain: no Node to work on: give `with.node`, or run the step at UpdateMachine"
        " (the Machine's Node)"
    )


def test_the_node_is_the_machines_read_from_the_management_cluster(
    kube: KubeEmulator, context: Context
) -> None:
    """UpdateMachine's request carries the Machine's spec, not its status: its Node is the
    Machine's `status.nodeRef` (cluster-api v1.12.0 api/core/v1beta2/machine_types.go)."""
    kube.declare("cluster.x-k8s.io", "v1beta2", "machines", "Machine", namespaced=True)
    kube.put_object(
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Machine",
            "metadata": {"name": "md-0-abc", "namespace": "fleet"},
            "spec": {"clusterName": "prod-eu-1"},
            "status": {"nodeRef": {"name": "worker-2"}},
        }
    )
    machine = {"name": "md-0-abc", "namespace": "fleet", "spec": {"version": "v1.33.0"}}
    ctx = context("node_uncordon", {}, hook="UpdateMachine", machine=machine)
    kube.put_object({**node("worker-2"), "spec": {"unschedulable": True}})
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert done.output == {"node": "worker-2", "uncordoned": True}
    assert not unschedulable(kube, "worker-2")

    gone = {"name": "md-0-zzz", "namespace": "fleet"}
    with pytest.raises(errors.PermanentError, match="Machine fleet/md-0-zzz does not exist"):
        run(context("node_uncordon", {}, hook="UpdateMachine", machine=gone))


def test_a_node_ref_in_the_context_is_used_as_is(kube: KubeEmulator, context: Context) -> None:
    machine = {"name": "m", "namespace": "fleet", "status": {"nodeRef": {"name": "worker-1"}}}
    ctx = context("node_drain", {}, hook="UpdateMachine", machine=machine)
    assert isinstance(run(ctx), registry.Done)
    assert unschedulable(kube)


def test_uncordon_makes_the_node_schedulable_and_is_idempotent(
    kube: KubeEmulator, context: Context
) -> None:
    run(context("node_drain", {"node": "worker-1"}, hook="UpdateMachine"))
    assert unschedulable(kube)
    done = run(context("node_uncordon", {"node": "worker-1"}, hook="UpdateMachine"))
    assert isinstance(done, registry.Done) and done.output["uncordoned"] is True
    assert not unschedulable(kube)
    again = run(context("node_uncordon", {"node": "worker-1"}, hook="UpdateMachine"))
    assert isinstance(again, registry.Done) and again.output["uncordoned"] is False


def test_a_pods_drain_label_skips_it_or_holds_the_drain_until_it_completes(
    kube: KubeEmulator, context: Context
) -> None:
    """cluster-api be6043dc filters.go `drainLabelFilter`: `cluster.x-k8s.io/drain: skip`
    (any case) leaves the Pod alone; `wait-completed` (any case, the hyphen optional) does
    not evict it but the drain is not complete while it is there (drain.go 8bb95107
    `EvictPods`, `PodsToWaitCompletedNow`); another value is drained as usual."""
    web = owner(kube, "StatefulSet", "web")
    kube.put_object(pod("keep", owned_by=web, labels={"cluster.x-k8s.io/drain": "Skip"}))
    kube.put_object(pod("batch", owned_by=web, labels={"cluster.x-k8s.io/drain": "WaitCompleted"}))
    kube.put_object(pod("odd", owned_by=web, labels={"cluster.x-k8s.io/drain": "later"}))
    ctx = context("node_drain", {"node": "worker-1"}, hook="UpdateMachine")

    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert waiting.message == (
        "Node worker-1 is draining: 2 Pods left; 1 to complete without eviction (default/batch)"
    )
    assert names(kube) == ["batch", "keep"], "odd evicted, batch and keep not"
    assert waiting.output is not None
    assert waiting.output["skipped"] == ["default/keep (label cluster.x-k8s.io/drain)"]
    assert waiting.output["waiting"] == ["default/batch"]

    still = run(ctx)
    assert isinstance(still, registry.Poll), "held while batch runs"
    assert still.message == (
        "Node worker-1 is draining: 1 Pods left; 1 to complete without eviction (default/batch)"
    )
    kube.delete_object(*PODS, "default", "batch")  # it completed and is gone
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert done.output["evicted"] == ["default/odd"]


def test_a_pod_whose_namespace_is_being_deleted_is_waited_for_not_a_failure(
    kube: KubeEmulator, context: Context
) -> None:
    """The NamespaceLifecycle admission plugin refuses every create in a terminating
    namespace, an eviction too: 403 with cause NamespaceTerminating (kubernetes 04791b49
    admission.go `Admit`); CAPI (drain.go 8bb95107 `EvictPods`) waits for the namespace
    controller to delete the Pod rather than failing."""
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "old"}})
    kube.put_object({**pod("web-1"), "metadata": {"name": "web-1", "namespace": "old"}})
    kube.set_status("", "v1", "namespaces", None, "old", {"phase": "Terminating"})
    ctx = context("node_drain", {"node": "worker-1"}, hook="UpdateMachine")

    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert waiting.message == (
        "Node worker-1 is draining: 1 Pods left; 1 refused eviction (old/web-1)"
    )
    assert waiting.output is not None
    assert waiting.output["refused"] == ["old/web-1: its namespace is being deleted"]

    kube.delete_object(*PODS, "old", "web-1")  # the namespace controller's deletion
    assert isinstance(run(ctx), registry.Done)
