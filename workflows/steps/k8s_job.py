"""`k8s_job`: runs a batch/v1 Job in the management or the workload cluster.

The Exec handler of hooksvc, as Kubernetes' container lifecycle hooks have one: for anything
the built-in steps do not cover, run a container. Done when the Job succeeds, failed when
it fails (a `Failed` condition, or more failed pods than `backoffLimit` allows); the output
keeps the tail of its pod's log either way. The Job is named after the run and step, so a
repeated start finds it instead of starting a second one. A Job still running when its step
is cancelled or times out is deleted (`cleanup`); a finished one stays for its TTL.
"""

from __future__ import annotations

from typing import Any

from workflows import errors, k8s
from workflows.steps import objects, registry

BATCH_API = "batch/v1"
#: The label the Job controller puts on its pods.
JOB_NAME_LABEL = "job-name"
LOG_CHARS = 8000


PARAMS = {
    "image": registry.Param(str, required=True),
    "command": registry.Param(list, check=objects.check_strings),
    "args": registry.Param(list, check=objects.check_strings),
    "env": registry.Param(dict, default={}, check=objects.check_string_map),
    "serviceAccountName": registry.Param(str),
    "namespace": registry.Param(str, default="default"),
    "cluster": registry.Param(str, default="workload", choices=("management", "workload")),
    "backoffLimit": registry.Param(int, default=0, minimum=0),
    "activeDeadlineSeconds": registry.Param(int, minimum=1),
    #: The Job and its pods stay this long after they finish, for `kubectl logs`.
    "ttlSecondsAfterFinished": registry.Param(int, default=86400, minimum=0),
    "logLines": registry.Param(int, default=50, minimum=1),
    "pollSeconds": registry.Param((int, float), default=10, minimum=1),
}


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


def _log_tail(ctx: registry.StepContext, api: k8s.ApiClient, name: str) -> str:
    """The end of the newest pod's log; "" when there is no pod or no log (yet)."""
    ns = ctx.params["namespace"]
    pods = objects.items(
        api,
        objects.path("v1", "pods", ns),
        what=f"pods of Job {ns}/{name}",
        selector={JOB_NAME_LABEL: name},
    )
    if not pods:
        return ""
    newest = max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))
    pod = newest["metadata"]["name"]
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


@registry.step_type("k8s_job", params=PARAMS, cleanup=cleanup)
def k8s_job(ctx: registry.StepContext) -> registry.Outcome:
    """Runs a Job and waits for it to finish."""
    api = objects.cluster_api(ctx, ctx.params["cluster"])
    ns, name = ctx.params["namespace"], ctx.object_name()
    what = f"Job {ns}/{name}"
    if not ctx.memo.get("created"):
        objects.ensure(api, objects.path(BATCH_API, "jobs", ns), _job(ctx, name), what=what)
        ctx.memo["created"] = True
    job = objects.get(api, objects.path(BATCH_API, "jobs", ns, name), what=what)
    if job is None:
        raise errors.PermanentError(f"{what} was deleted")
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
    return registry.Poll(after=ctx.params["pollSeconds"], message=f"{what} is running")
