"""`node_job`: a `k8s_job` pinned to one Node of the workload cluster.

The in-place update's work on the Machine's Node (replace the kubelet, write a file, restart
a service): the Job of `k8s_job`, created and followed by the same code
(`k8s_job.manifest`, `k8s_job.follow`: outcome, log tail, stuck pods, cleanup), whose pod
names the Node in `spec.nodeName`. A pod with `nodeName` is not scheduled: kube-scheduler
leaves it to that Node's kubelet, so the cordon of a drained Node does not keep it out; it
also tolerates the cordon's `node.kubernetes.io/unschedulable:NoSchedule` taint
(kubernetes pkg/controller/nodelifecycle, TaintNodesByCondition), as DaemonSet pods do
(pkg/controller/daemon/util/daemonset_util.go `AddOrUpdateDaemonPodTolerations`), so that
a scheduler extension or policy that does look at taints lets it run.
"""

from __future__ import annotations

from workflows.steps import k8s_job, nodes, objects, registry

#: v1.TaintNodeUnschedulable, the taint of a cordoned Node.
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
TOLERATION = {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}

PARAMS = {
    **{key: param for key, param in k8s_job.PARAMS.items() if key != "cluster"},
    "node": nodes.NODE_PARAM,
}


def _pinned(ctx: registry.StepContext, name: str) -> objects.JSON:
    job = k8s_job.manifest(ctx, name)
    pod = job["spec"]["template"]["spec"]
    pod["nodeName"] = nodes.name(ctx)
    pod["tolerations"] = [TOLERATION]
    return job


@registry.step_type(
    "node_job", params=PARAMS, check=k8s_job.check, cleanup=k8s_job.cleanup, stall_seconds=1800
)
def node_job(ctx: registry.StepContext) -> registry.Outcome:
    """Runs a Job on the Node and waits for it to finish."""
    if not ctx.memo.get("created"):
        # A Job bound to a Node that does not exist would wait for ever: refuse it first.
        nodes.read(ctx, objects.workload(ctx), nodes.name(ctx))
    return k8s_job.follow(ctx, _pinned)
