"""The Node a step works on, in the run's workload cluster, and cordoning it.

Steps of in-place updates (`node_drain`, `node_uncordon`, `node_wait`, `node_job`) work on
one Node: the one their `with.node` names or, at UpdateMachine, the Machine's. CAPI's
UpdateMachine request carries the Machine's metadata and spec but not its status, so the
Node is read from the Machine's `status.nodeRef` in the management cluster (cluster-api
v1.12.0 `api/core/v1beta2/machine_types.go` `MachineStatus.NodeRef`) when the run's context
does not carry it. The name is kept in the step's memo, so every poll works on the same Node.
"""

from __future__ import annotations

from typing import Any

from workflows import errors
from workflows.kube import k8s
from workflows.steps import objects, registry

NODE_PARAM = registry.Param(str)
MERGE_PATCH = "application/merge-patch+json"
MACHINES = ("cluster.x-k8s.io/v1beta2", "machines")


def _node_ref(machine: Any) -> str:
    if not isinstance(machine, dict):
        return ""
    ref = (machine.get("status") or {}).get("nodeRef") or {}
    return str(ref.get("name") or "") if isinstance(ref, dict) else ""


def _machine_node(machine: dict[str, Any]) -> str:
    """The Node of the run's Machine, read from the management cluster."""
    ns, name = str(machine.get("namespace") or ""), str(machine.get("name") or "")
    what = f"Machine {ns}/{name}"
    found = objects.get(
        k8s.management_api(), objects.path(MACHINES[0], MACHINES[1], ns, name), what=what
    )
    if found is None:
        raise errors.PermanentError(f"{what} does not exist in the management cluster")
    node = _node_ref(found)
    if not node:
        raise errors.PermanentError(f"{what} has no Node (its status.nodeRef is empty)")
    return node


def name(ctx: registry.StepContext) -> str:
    """The Node's name: `with.node`, else the run's Machine's `status.nodeRef`."""
    if ctx.memo.get("node"):
        return str(ctx.memo["node"])
    node = str(ctx.params.get("node") or "")
    machine = ctx.run_context.get("machine")
    if not node and isinstance(machine, dict):
        node = _node_ref(machine) or (_machine_node(machine) if machine.get("name") else "")
    if not node:
        raise errors.PermanentError(
            f"step {ctx.step_name}: no Node to work on: give `with.node`, or run the step at"
            " UpdateMachine (the Machine's Node)"
        )
    ctx.memo["node"] = node
    return node


def read(ctx: registry.StepContext, api: k8s.ApiClient, node: str) -> objects.JSON:
    """The Node, or a permanent error naming the cluster when it does not exist."""
    found = objects.get(api, objects.path("v1", "nodes", None, node), what=f"Node {node}")
    if found is None:
        cluster = f"{ctx.cluster.get('namespace')}/{ctx.cluster.get('name')}"
        raise errors.PermanentError(f"Node {node} does not exist in the workload cluster {cluster}")
    return found


def cordon(api: k8s.ApiClient, node: objects.JSON, unschedulable: bool) -> bool:
    """Set the Node's `spec.unschedulable` (kubectl pkg/drain/cordon.go); False if it was."""
    if bool((node.get("spec") or {}).get("unschedulable")) == unschedulable:
        return False
    node_name = node["metadata"]["name"]
    k8s.request(
        api,
        "PATCH",
        objects.path("v1", "nodes", None, node_name),
        body={"spec": {"unschedulable": unschedulable}},
        content_type=MERGE_PATCH,
        what=f"Node {node_name}",
    )
    return True


@registry.step_type("node_uncordon", params={"node": NODE_PARAM}, stall_seconds=300)
def node_uncordon(ctx: registry.StepContext) -> registry.Outcome:
    """Makes the Node schedulable again (spec.unschedulable false)."""
    api = objects.workload(ctx)
    node = name(ctx)
    changed = cordon(api, read(ctx, api, node), False)
    return registry.Done({"node": node, "uncordoned": changed})


def _ready(node: objects.JSON) -> str:
    """The Node's Ready condition status ("True", "False", "Unknown"; "" when none)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status") or "")
    return ""


def _version(ctx: registry.StepContext) -> str:
    """The version to wait for: `with.version`, else the run's Machine's desired one."""
    machine = ctx.run_context.get("machine")
    machine = machine if isinstance(machine, dict) else {}
    wanted = str(
        ctx.params.get("version")
        or machine.get("version")
        or (machine.get("spec") or {}).get("version")
        or ""
    )
    if not wanted:
        raise errors.PermanentError(
            f"step {ctx.step_name}: no version to wait for: give `with.version`, or run the"
            " step at UpdateMachine (the Machine's spec.version)"
        )
    return wanted if wanted.startswith("v") else f"v{wanted}"


def reports(kubelet: str, wanted: str) -> bool:
    """Whether the kubelet's reported version is `wanted`: the kubelet reports its build's
    gitVersion (`v1.33.1`); a distribution's build metadata after `+` (`v1.33.1+k3s1`)
    does not make it another version (semver: build metadata has no precedence)."""
    return kubelet.partition("+")[0] == wanted


WAIT_PARAMS = {
    "node": NODE_PARAM,
    "version": registry.Param(str),
    "pollSeconds": registry.Param((int, float), default=10, minimum=1),
}


@registry.step_type("node_wait", params=WAIT_PARAMS, stall_seconds=1800)
def node_wait(ctx: registry.StepContext) -> registry.Outcome:
    """Waits until the Node's kubelet reports the desired version and the Node is Ready."""
    api = objects.workload(ctx)
    node = name(ctx)
    wanted = _version(ctx)
    found = read(ctx, api, node)
    kubelet = str(((found.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or "")
    ready = _ready(found)
    output = {"node": node, "kubeletVersion": kubelet, "ready": ready}
    if reports(kubelet, wanted) and ready == "True":
        return registry.Done(output)
    now = f"kubelet {kubelet or '(none)'}, Ready {ready or '(none)'}"
    return objects.wait_or_fail(
        ctx,
        after=ctx.params["pollSeconds"],
        message=f"Node {node} reports {now}; waiting for kubelet {wanted} and Ready True",
        output=output,
        failure=(
            f"Node {node} did not report kubelet {wanted} and Ready True within the step's"
            f" timeout (it reports {now})"
        ),
    )
