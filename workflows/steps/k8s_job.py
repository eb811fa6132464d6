"""`k8s_job`: runs a batch/v1 Job in the management or the workload cluster.

The Exec handler of hooksvc, as Kubernetes' container lifecycle hooks have one: for anything
the built-in steps do not cover, run a container. Done when the Job succeeds, failed when
it fails (a `Failed` condition, or more failed pods than `backoffLimit` allows); the output
keeps the tail of its pod's log either way. The Job is named after the run and step, so a
repeated start finds it instead of starting a second one. A Job still running when its step
is cancelled or times out is deleted (`cleanup`); a finished one stays for its TTL.

Following the Jobs documentation (kubernetes.io/docs/concepts/workloads/controllers/job/):
the Job's `podFailurePolicy` ignores Pods that failed because they were disrupted
(`DisruptionTarget`: preemption, eviction, a Node drained), so an upgrade that drains Nodes
does not spend `backoffLimit`; the TTL-after-finished controller deletes a finished Job
`ttlSecondsAfterFinished` after it ends (ttlafterfinished), so a TTL shorter than the poll
interval is refused when the template is applied: the Job could vanish before the step reads
its outcome. A Pod whose image cannot be pulled (or that cannot be scheduled, or keeps
crashing) fails the step after `stuckGraceSeconds` (see `pods`), and its Job is deleted.
"""

from __future__ import annotations

from typing import Any

from workflows import errors
from workflows.kube import k8s
from workflows.steps import objects, pods, registry

BATCH_API = "batch/v1"
#: The label the Job controller puts on its pods.
JOB_NAME_LABEL = "job-name"
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
    #: How long the Job's Pod may wait with an image it cannot pull (or unscheduled, or
    #: crashing) before the step fails.
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


def _job(ctx: registry.StepContext, name: str) -> objects.JSON:
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


def _log_tail(ctx: registry.StepContext, api: k8s.ApiClient, name: str) -> str:
    """The end of the newest pod's log; "" when there is no pod or no log (yet)."""
    ns = ctx.params["namespace"]
    found = _pods(ctx, api, name)
    if not found:
        return ""
    pod = found[-1]["metadata"]["name"]
    try:
        text = k8s.call(
            k8s.core(api).read_namespaced_pod_log,
            pod,
            ns,
            tail_lines=ctx.params["logLines"],
            what=f"log of Pod {ns}/{pod}",
        )
    except k8s.NotFound:
        return ""
    return objects.tail(str(text or ""), LOG_CHARS)


def _condition(job: objects.JSON, kind: str) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def _failed(ctx: registry.StepContext, job: objects.JSON) -> bool:
    failed = int((job.get("status") or {}).get("failed") or 0)
    return _condition(job, "Failed") or failed >= ctx.params["backoffLimit"] + 1


def _succeeded(job: objects.JSON) -> bool:
    return _condition(job, "Complete") or int((job.get("status") or {}).get("succeeded") or 0) > 0


def cleanup(ctx: registry.StepContext) -> None:
    """Stops the Job if it still runs (a cancel, a timeout); a finished Job is left to its TTL."""
    if not ctx.memo.get("created"):
        return
    api = objects.cluster_api(ctx, ctx.params["cluster"])
    ns, name = ctx.params["namespace"], ctx.object_name()
    path = objects.path(BATCH_API, "jobs", ns, name)
    job = objects.get(api, path, what=f"Job {ns}/{name}")
    if job is not None and not _succeeded(job) and not _failed(ctx, job):
        objects.delete(api, path, what=f"Job {ns}/{name}")


def _trouble(ctx: registry.StepContext, api: k8s.ApiClient, name: str) -> pods.Trouble | None:
    """Why the Job's running pod does not start, if it does not."""
    running = [
        p
        for p in _pods(ctx, api, name)
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    return pods.trouble(running[-1]) if running else None


@registry.step_type("k8s_job", params=PARAMS, check=check, cleanup=cleanup)
def k8s_job(ctx: registry.StepContext) -> registry.Outcome:
    """Runs a Job and waits for it to finish."""
    api = objects.cluster_api(ctx, ctx.params["cluster"])
    ns, name = ctx.params["namespace"], ctx.object_name()
    what = f"Job {ns}/{name}"
    path = objects.path(BATCH_API, "jobs", ns, name)
    if not ctx.memo.get("created"):
        objects.ensure(api, objects.path(BATCH_API, "jobs", ns), _job(ctx, name), what=what)
        ctx.memo["created"] = True
    job = objects.get(api, path, what=what)
    if job is None:
        raise errors.PermanentError(f"{what} was deleted before the step read its outcome")
    status = job.get("status") or {}
    succeeded, failed = int(status.get("succeeded") or 0), int(status.get("failed") or 0)
    output: dict[str, Any] = {
        "job": {"namespace": ns, "name": name},
        "succeeded": succeeded,
        "failed": failed,
    }
    if _succeeded(job):
        return registry.Done({**output, "log": _log_tail(ctx, api, name)})
    if _failed(ctx, job):
        output["log"] = _log_tail(ctx, api, name)
        raise errors.PermanentError(f"{what} failed", output=output)
    found = _trouble(ctx, api, name)
    if pods.stuck(ctx.memo, found, ctx.params["stuckGraceSeconds"]) and found is not None:
        # Nothing will change by waiting: stop the Job rather than leave its pod waiting.
        objects.delete(api, path, what=what)
        raise errors.PermanentError(
            f"{what} is stuck: {found.describe()}", output={**output, "stuck": found.output()}
        )
    message = f"{what} is running" + (f": {found.describe()}" if found else "")
    return registry.Poll(after=ctx.params["pollSeconds"], message=message)
