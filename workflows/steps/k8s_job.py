"""`k8s_job`: runs a batch/v1 Job in the management or the workload cluster.

The Exec handler of hooksvc, as Kubernetes' container lifecycle hooks have one: for anything
the built-in steps do not cover, run a container. The Job is named after the run and step,
so a repeated start finds it instead of starting a second one. Its outcome is read from the
conditions the Job controller writes (kubernetes v1.33 pkg/controller/job/job_controller.go):
done at `SuccessCriteriaMet` (or `Complete`), failed at `FailureTarget` (or `Failed`) with
the controller's reason (`BackoffLimitExceeded`, `DeadlineExceeded`, `PodFailurePolicy`) in
the message; since v1.31 the terminal condition waits for the pods to stop, the first one
does not. The output keeps the tail of the newest pod's log either way (none if its
container never ran), and how its container ended. The log is best effort: when it cannot
be read (its Node's kubelet unreachable: a 500 from the API server's proxy) the Job's
outcome stands and the output says why the log is missing (`logUnavailable`).

The Job's `podFailurePolicy` ignores pods that failed because they were disrupted
(`DisruptionTarget`: preemption, eviction, a Node drained), so an upgrade that drains Nodes
does not spend `backoffLimit`; the TTL-after-finished controller deletes a finished Job
`ttlSecondsAfterFinished` after it ends (ttlafterfinished), so a TTL shorter than the poll
interval is refused when the template is applied: the Job could vanish before the step reads
its outcome.

A pod that will not start by waiting fails the step after `stuckGraceSeconds` (see `pods`),
and its Job is deleted: the API server refuses to create it (the Job controller records
`FailedCreate` Events on the Job and sets no condition, trying again forever), it cannot be
scheduled, or its container cannot be pulled, configured, created or started. A Job still
running when its step is cancelled or times out is deleted (`cleanup`); a finished one stays
for its TTL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workflows import errors
from workflows.kube import k8s
from workflows.steps import objects, pods, registry

BATCH_API = "batch/v1"
#: The label the Job controller puts on its pods.
JOB_NAME_LABEL = "job-name"
#: The Job conditions that decide the step, in the order they are looked at (batch/v1
#: JobConditionType; docs/upstream.md records them).
CONDITIONS = {
    "Complete": "succeeded",
    "SuccessCriteriaMet": "succeeded",
    "Failed": "failed",
    "FailureTarget": "failed",
}
LOG_CHARS = 8000
#: Pods that failed because they were disrupted do not count towards backoffLimit; the
#: Jobs page's own example rule. It needs restartPolicy Never, which the Job's Pod has.
POD_FAILURE_POLICY = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
}


PARAMS = {
    "image": registry.Param(str, required=True),
    "command": registry.Param(list, check=objects.check_strings, items=objects.STRING),
    "args": registry.Param(list, check=objects.check_strings, items=objects.STRING),
    "env": registry.Param(dict, default={}, check=objects.check_string_map, values=objects.STRING),
    "serviceAccountName": registry.Param(str),
    "namespace": registry.Param(str, default="default"),
    "cluster": registry.Param(str, default="workload", choices=("management", "workload")),
    "backoffLimit": registry.Param(int, default=0, minimum=0),
    "activeDeadlineSeconds": registry.Param(int, minimum=1),
    #: The Job and its pods stay this long after they finish, for `kubectl logs`; at least
    #: `pollSeconds`, or the Job could be gone before the step reads its outcome.
    "ttlSecondsAfterFinished": registry.Param(int, default=86400, minimum=0),
    "logLines": registry.Param(int, default=50, minimum=1),
    "pollSeconds": registry.Param((int, float), default=10, minimum=1),
    #: How long the Job's pod may go uncreated (FailedCreate), unscheduled, unpulled or
    #: unable to start before the step fails (see `pods`).
    "stuckGraceSeconds": registry.Param((int, float), default=300, minimum=0),
}


def check(params: dict[str, Any], hook: str) -> None:
    """A TTL shorter than the poll interval would delete the Job before it is read."""
    ttl, poll = params["ttlSecondsAfterFinished"], params["pollSeconds"]
    if ttl < poll:
        raise registry.ParamError(
            "ttlSecondsAfterFinished",
            f"must be at least pollSeconds ({poll:g}): the Job is deleted that long after it"
            " finishes, before the step would read its outcome",
        )


def manifest(ctx: registry.StepContext, name: str) -> objects.JSON:
    """The Job the step creates, named `name`."""
    params = ctx.params
    container: dict[str, Any] = {"name": "job", "image": params["image"]}
    if params.get("command"):
        container["command"] = list(params["command"])
    if params.get("args"):
        container["args"] = list(params["args"])
    if params.get("env"):
        container["env"] = [{"name": k, "value": v} for k, v in sorted(params["env"].items())]
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if params.get("serviceAccountName"):
        pod_spec["serviceAccountName"] = params["serviceAccountName"]
    spec: dict[str, Any] = {
        "backoffLimit": params["backoffLimit"],
        "podFailurePolicy": POD_FAILURE_POLICY,
        "ttlSecondsAfterFinished": params["ttlSecondsAfterFinished"],
        "template": {"metadata": {"labels": objects.labels(ctx)}, "spec": pod_spec},
    }
    if params.get("activeDeadlineSeconds"):
        spec["activeDeadlineSeconds"] = params["activeDeadlineSeconds"]
    return {
        "apiVersion": BATCH_API,
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": params["namespace"],
            "labels": objects.labels(ctx),
        },
        "spec": spec,
    }


def _pods(ctx: registry.StepContext, api: k8s.ApiClient, name: str) -> list[objects.JSON]:
    """The Job's pods, oldest first."""
    ns = ctx.params["namespace"]
    found = objects.items(
        api,
        objects.path("v1", "pods", ns),
        what=f"pods of Job {ns}/{name}",
        selector={JOB_NAME_LABEL: name},
    )
    return sorted(found, key=_age)


def _age(pod: objects.JSON) -> tuple[str, bool, str]:
    """Creation, then whether it was not disrupted, then its end (running: last).

    Timestamps have whole seconds, and a disrupted pod's replacement is made at once, often
    within the same second: the replacement is the newer one.
    """
    status = pod.get("status") or {}
    disrupted = any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    ends = [
        ((c.get("state") or {}).get("terminated") or {}).get("finishedAt") or "~"
        for c in status.get("containerStatuses") or []
    ]
    return pod["metadata"].get("creationTimestamp", ""), not disrupted, max(ends, default="~")


def _log_tail(
    ctx: registry.StepContext, api: k8s.ApiClient, found: list[objects.JSON]
) -> dict[str, Any]:
    """The end of the newest pod's log ("" when there is no pod or no log yet), for the
    output; best effort: a Job that finished has its outcome whether or not its log can be
    read. The API server proxies the read to the pod's kubelet (pkg/registry/core/pod/rest/
    log.go); a kubelet it cannot reach is a 500 (responsewriters ErrorToAPIStatus), which
    may last as long as the Node is away."""
    if not found:
        return {"log": ""}
    ns, pod = ctx.params["namespace"], found[-1]["metadata"]["name"]
    what = f"log of Pod {ns}/{pod}"
    try:
        tail = pods.log(api, ns, pod, tail_lines=ctx.params["logLines"], what=what)
    except k8s.K8sError as exc:
        answer = f"API server answered {exc.status}" if exc.status else "no answer"
        return {"log": "", "logUnavailable": f"the {what} could not be read ({answer})"}
    return {"log": objects.tail(tail, LOG_CHARS)}


def _ended(found: list[objects.JSON]) -> dict[str, Any]:
    """How the newest pod's container ended (exitCode, reason), for the output; {} if not."""
    for pod in reversed(found):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated") or {}
            if terminated:
                ended = {k: terminated[k] for k in ("exitCode", "reason") if k in terminated}
                message = str(terminated.get("message") or "")[: pods.DETAIL_CHARS]
                return {**ended, "message": message} if message else ended
    return {}


def outcome(job: objects.JSON) -> tuple[str, objects.JSON] | None:
    """("succeeded" | "failed", the condition) once the Job controller has decided, else None.

    Since Kubernetes v1.31 the controller first writes `SuccessCriteriaMet` or
    `FailureTarget` and adds the terminal `Complete` or `Failed` only once the Job's pods
    have stopped (job_controller.go, `delayTerminalCondition`): the outcome is known from the
    first, and a Job with `FailureTarget` is failing, not running.
    """
    conditions = {
        c.get("type"): c
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }
    for kind, result in CONDITIONS.items():
        if kind in conditions:
            return result, conditions[kind]
    return None


def cleanup(ctx: registry.StepContext) -> None:
    """Stops the Job if it still runs (a cancel, a timeout); a finished Job is left to its TTL."""
    if not ctx.memo.get("created"):
        return
    api = _api(ctx)
    ns, name = ctx.params["namespace"], ctx.object_name()
    path = objects.path(BATCH_API, "jobs", ns, name)
    job = objects.get(api, path, what=f"Job {ns}/{name}")
    if job is not None and outcome(job) is None:
        objects.delete(api, path, what=f"Job {ns}/{name}")


def _failed_create(
    ctx: registry.StepContext, api: k8s.ApiClient, job: objects.JSON, since: str
) -> pods.Trouble | None:
    """The Job controller's latest `FailedCreate` Event on this Job, if none of its pods is
    newer: the API server refuses the pod (a missing ServiceAccount, a quota, a policy)."""
    ns, uid = ctx.params["namespace"], job["metadata"]["uid"]
    selector = f"involvedObject.uid={uid},reason=FailedCreate"
    found = k8s.request(
        api,
        "GET",
        objects.path("v1", "events", ns),
        query=[("fieldSelector", selector)],
        what=f"Events of Job {ns}/{job['metadata']['name']}",
    )["items"]
    latest = max(
        found,
        key=lambda e: (e.get("lastTimestamp") or "", int(e.get("count") or 0)),
        default=None,
    )
    # Timestamps have whole seconds: an Event of the second the newest pod was made counts.
    if latest is None or (latest.get("lastTimestamp") or "") < since:
        return None
    return pods.Trouble("FailedCreate", detail=str(latest.get("message") or ""))


def _trouble(
    ctx: registry.StepContext, api: k8s.ApiClient, job: objects.JSON, found: list[objects.JSON]
) -> pods.Trouble | None:
    """Why the Job's pod does not start: its newest running pod's trouble, or, with none
    running, why the Job controller cannot create one."""
    running = [
        p
        for p in found
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and not p["metadata"].get("deletionTimestamp")
    ]
    if running:
        return pods.trouble(running[-1])
    since = max((p["metadata"].get("creationTimestamp", "") for p in found), default="")
    return _failed_create(ctx, api, job, since)


# A Job reports the same while its Pod runs: half of its default bound.
@registry.step_type("k8s_job", params=PARAMS, check=check, cleanup=cleanup, stall_seconds=1800)
def k8s_job(ctx: registry.StepContext) -> registry.Outcome:
    """Runs a Job and waits for it to finish."""
    return follow(ctx, manifest)


def _api(ctx: registry.StepContext) -> k8s.ApiClient:
    # Types built on this one (node_job) have no `cluster`: theirs is the workload cluster.
    return objects.cluster_api(ctx, ctx.params.get("cluster", "workload"))


def follow(
    ctx: registry.StepContext, make: Callable[[registry.StepContext, str], objects.JSON]
) -> registry.Outcome:
    """Create the Job `make` gives (once), then read how it is doing: the step's one look."""
    api = _api(ctx)
    ns, name = ctx.params["namespace"], ctx.object_name()
    what = f"Job {ns}/{name}"
    path = objects.path(BATCH_API, "jobs", ns, name)
    if not ctx.memo.get("created"):
        objects.ensure(api, objects.path(BATCH_API, "jobs", ns), make(ctx, name), what=what)
        ctx.memo["created"] = True
    job = objects.get(api, path, what=what)
    if job is None:
        raise errors.PermanentError(f"{what} was deleted before the step read its outcome")
    status = job.get("status") or {}
    # A pod the controller counted but whose finalizer it has not removed yet is in
    # uncountedTerminatedPods, not yet in succeeded/failed (trackJobStatusAndRemoveFinalizers).
    uncounted = status.get("uncountedTerminatedPods") or {}
    output: dict[str, Any] = {
        "job": {"namespace": ns, "name": name},
        **{
            kind: int(status.get(kind) or 0) + len(uncounted.get(kind) or [])
            for kind in ("succeeded", "failed")
        },
    }
    found = _pods(ctx, api, name)
    decided = outcome(job)
    if decided is not None:
        result, condition = decided
        output["condition"] = {k: condition.get(k, "") for k in ("type", "reason", "message")}
        output.update(_log_tail(ctx, api, found))
        if result == "succeeded":
            return registry.Done(output)
        if ended := _ended(found):
            output["container"] = ended
        reason = str(condition.get("reason") or "")
        unread = "; its log could not be read" if "logUnavailable" in output else ""
        raise errors.PermanentError(
            f"{what} failed" + (f" ({reason})" if reason else "") + unread, output=output
        )
    trouble = _trouble(ctx, api, job, found)
    if pods.stuck(ctx.memo, trouble, ctx.params["stuckGraceSeconds"]) and trouble is not None:
        # Nothing will change by waiting: stop the Job rather than leave it trying.
        objects.delete(api, path, what=what)
        raise errors.PermanentError(
            f"{what} is stuck: {trouble.describe()}", output={**output, "stuck": trouble.output()}
        )
    message = f"{what} is waiting: {trouble.describe()}" if trouble else f"{what} is running"
    return registry.Poll(after=ctx.params["pollSeconds"], message=message)
