"""`node_drain`: cordons a Node and evicts its Pods through the Eviction API.

As `kubectl drain` (kubernetes 94341df3 `staging/src/k8s.io/kubectl/pkg/drain/`) and CAPI's
Machine controller (cluster-api 8bb95107 `internal/controllers/machine/drain/drain.go`,
be6043dc `filters.go`) do it: the Node gets `spec.unschedulable`; its Pods are listed by
`spec.nodeName`; mirror Pods (the kubelet's static Pods, annotation
`kubernetes.io/config.mirror`) and running Pods of an existing DaemonSet are left alone
(the DaemonSet controller tolerates the cordon and would make them again), an orphaned
DaemonSet Pod is evicted; then, as CAPI reads a Pod's own label `cluster.x-k8s.io/drain`,
`skip` leaves it alone and `wait-completed` leaves it running but holds the drain until it
is gone. Every other Pod not already being deleted gets a policy/v1 Eviction. The API
server refuses one that a PodDisruptionBudget forbids with 429 TooManyRequests
(pkg/registry/core/pod/storage/eviction.go), and one in a namespace being deleted with 403
NamespaceTerminating (the namespace controller deletes the Pod): both are "later", not a
failure, so the step polls and tries again, as CAPI does on its next reconcile. The Node is
drained when none of the Pods to evict or wait for is left (evicted Pods may take their
grace period to go). The step's timeout bounds it; just before it, the step fails naming
what is left. CAPI's MachineDrainRules (drain order, rules per Machine) are not read.
"""

from __future__ import annotations

from typing import Any

from workflows.kube import k8s
from workflows.steps import nodes, objects, registry

#: corev1.MirrorPodAnnotationKey
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
#: The `DisruptionBudget` cause of the API server's 429 (policyv1.DisruptionBudgetCause).
BUDGET_CAUSE = "DisruptionBudget"
#: The cause of a create refused in a terminating namespace (corev1.NamespaceTerminatingCause).
TERMINATING_CAUSE = "NamespaceTerminating"
#: CAPI's clusterv1.PodDrainLabel: a Pod's own say in a drain (filters.go `drainLabelFilter`).
DRAIN_LABEL = "cluster.x-k8s.io/drain"
#: What `_behaviour` says of a Pod: evict it, leave it alone, or wait for it without eviction.
DRAIN, SKIP, WAIT = "drain", "skip", "wait"
#: How many Pods a message names before "and N more".
NAMED = 3

PARAMS = {
    "node": nodes.NODE_PARAM,
    "pollSeconds": registry.Param((int, float), default=10, minimum=1),
}


def _key(pod: objects.JSON) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _controller(pod: objects.JSON) -> objects.JSON:
    refs = pod["metadata"].get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), {})


def _daemonset_pod(api: k8s.ApiClient, pod: objects.JSON) -> bool:
    """filters.go `daemonSetFilter`: a running Pod of an existing DaemonSet (a finished
    Pod, or one whose DaemonSet is gone, is evicted)."""
    owner = _controller(pod)
    if owner.get("kind") != "DaemonSet":
        return False
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    ns = pod["metadata"]["namespace"]
    daemonset = objects.get(
        api,
        objects.path("apps/v1", "daemonsets", ns, str(owner.get("name"))),
        what=f"DaemonSet {ns}/{owner.get('name')}",
    )
    return daemonset is not None


def _behaviour(api: k8s.ApiClient, pod: objects.JSON) -> tuple[str, str]:
    """What the drain does with `pod` and why: CAPI's filters in their order, the first that
    skips or waits deciding (drain.go `GetPodsForEviction`, `filterPods`)."""
    if _daemonset_pod(api, pod):
        return SKIP, "DaemonSet Pod"
    if MIRROR_ANNOTATION in (pod["metadata"].get("annotations") or {}):
        return SKIP, "mirror Pod"
    value = str((pod["metadata"].get("labels") or {}).get(DRAIN_LABEL, "")).lower()
    # drainLabelFilter: EqualFold with "Skip"; with "WaitCompleted" once one "-" is dropped.
    if value == "skip":
        return SKIP, f"label {DRAIN_LABEL}"
    if value.replace("-", "", 1) == "waitcompleted":
        return WAIT, f"label {DRAIN_LABEL}: waits for it to complete"
    return DRAIN, ""


def _evict(api: k8s.ApiClient, pod: objects.JSON) -> str:
    """Ask the API server to evict `pod`: "" when it accepted (or the Pod is gone), else why
    not for now (a 429: a PodDisruptionBudget allows no disruption, or the server is busy)."""
    ns, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod_name, "namespace": ns},
    }
    try:
        k8s.request(
            api,
            "POST",
            objects.path("v1", "pods", ns, f"{pod_name}/eviction"),
            body=body,
            what=f"eviction of Pod {ns}/{pod_name}",
        )
    except k8s.NotFound:
        return ""
    except k8s.K8sError as exc:
        if exc.status == 403 and TERMINATING_CAUSE in exc.causes:
            # NamespaceLifecycle admission: the namespace controller deletes the Pod.
            return "its namespace is being deleted"
        if exc.status != 429:
            raise
        if BUDGET_CAUSE in exc.causes or "disruption budget" in str(exc):
            return "its PodDisruptionBudget allows no disruption now"
        return "the API server asked to try later (429)"
    return ""


def _named(keys: list[str]) -> str:
    shown = ", ".join(keys[:NAMED])
    return shown + (f" and {len(keys) - NAMED} more" if len(keys) > NAMED else "")


def _pods_on(api: k8s.ApiClient, node: str) -> list[objects.JSON]:
    found: list[objects.JSON] = k8s.request(
        api,
        "GET",
        objects.path("v1", "pods"),
        query=[("fieldSelector", f"spec.nodeName={node}")],
        what=f"Pods on Node {node}",
    )["items"]
    return sorted(found, key=_key)


# Evictions a budget refuses can hold a drain for long: twice the default bound.
@registry.step_type("node_drain", params=PARAMS, stall_seconds=1800)
def node_drain(ctx: registry.StepContext) -> registry.Outcome:
    """Cordons the Node and evicts its Pods, honouring PodDisruptionBudgets."""
    api = objects.workload(ctx)
    node = nodes.name(ctx)
    nodes.cordon(api, nodes.read(ctx, api, node), True)
    skipped: dict[str, str] = {}
    left: list[str] = []
    waiting: list[str] = []
    refused: dict[str, str] = {}
    evicted = set(ctx.memo.get("evicted") or [])
    for pod in _pods_on(api, node):
        key = _key(pod)
        behaviour, why = _behaviour(api, pod)
        if behaviour == SKIP:
            skipped[key] = why
            continue
        left.append(key)
        if behaviour == WAIT:
            waiting.append(key)
            continue
        if pod["metadata"].get("deletionTimestamp"):
            continue
        if why := _evict(api, pod):
            refused[key] = why
        else:
            evicted.add(key)
    ctx.memo["evicted"] = sorted(evicted)
    output: dict[str, Any] = {
        "node": node,
        "evicted": sorted(evicted),
        "skipped": [f"{key} ({why})" for key, why in sorted(skipped.items())],
    }
    if not left:
        return registry.Done(output)
    output["left"] = left
    if waiting:
        output["waiting"] = waiting
    if refused:
        output["refused"] = [f"{key}: {why}" for key, why in sorted(refused.items())]
    blocked = f"; {len(refused)} refused eviction ({_named(sorted(refused))})" if refused else ""
    if waiting:
        blocked += f"; {len(waiting)} to complete without eviction ({_named(waiting)})"
    return objects.wait_or_fail(
        ctx,
        after=ctx.params["pollSeconds"],
        message=f"Node {node} is draining: {len(left)} Pods left{blocked}",
        output=output,
        failure=(
            f"Node {node} was not drained within the step's timeout: {len(left)} Pods left"
            f" ({_named(left)}){blocked}"
        ),
    )
