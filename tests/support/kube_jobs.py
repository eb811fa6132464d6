"""The Job controller and the TTL-after-finished controller of the Kubernetes API emulator.

Switched on by `kube_workloads.start`. They follow the Jobs documentation
(https://kubernetes.io/docs/concepts/workloads/controllers/job/) for Jobs of one Pod at a
time (parallelism and completions 1, what `k8s_job` makes):

- `JobController` creates the Job's Pod from its template (generateName `<job>-`, the
  labels `batch.kubernetes.io/job-name`, `job-name`, `batch.kubernetes.io/controller-uid`,
  `controller-uid`, and a controller ownerReference), counts it `succeeded` or `failed`
  when it ends, and replaces a failed Pod after the backoff (10 s doubling, capped at six
  minutes) while `failed` stays within `backoffLimit`. Past it, the Job gets
  `FailureTarget` and, its Pods all ended, `Failed`, both with reason
  `BackoffLimitExceeded`; a success gives `SuccessCriteriaMet`, then `Complete` with
  `completionTime` (the terminal conditions wait for the Pods to end, as since v1.31).
  `podFailurePolicy` rules are matched in order against a failed Pod (`onPodConditions`,
  `onExitCodes`): `Ignore` does not count it and replaces it at once, `FailJob` fails the
  Job (reason `PodFailurePolicy`), `Count` is the default handling.
- `JobTTLController` deletes a Job `ttlSecondsAfterFinished` after it got `Complete` or
  `Failed` (https://kubernetes.io/docs/concepts/workloads/controllers/ttlafterfinished/).

Kubernetes' durations are multiplied by `time_scale`, as in `kube_workloads`.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

from tests.support import kube_lifecycle
from tests.support.kube_semantics import JSON
from tests.support.kube_store import Change, Store

JOBS = ("batch", "v1", "jobs")
PODS = ("", "v1", "pods")
#: The Job controller's Pod replacement backoff: 10 s doubling, capped at six minutes.
BACKOFF, MAX_BACKOFF = 10.0, 360.0
_TERMINAL = ("Complete", "Failed")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(job: JSON, kind: str) -> JSON | None:
    """The Job's condition `kind` when it is True."""
    for found in (job.get("status") or {}).get("conditions") or []:
        if found.get("type") == kind and found.get("status") == "True":
            return dict(found)
    return None


def finished(job: JSON) -> bool:
    return any(condition(job, kind) for kind in _TERMINAL)


def _rule_matches(rule: JSON, pod: JSON) -> bool:
    status = pod.get("status") or {}
    for wanted in rule.get("onPodConditions") or []:
        for found in status.get("conditions") or []:
            if found.get("type") == wanted.get("type") and found.get("status") == (
                wanted.get("status") or "True"
            ):
                return True
    exits = rule.get("onExitCodes")
    if exits:
        codes = set(exits.get("values") or [])
        for container in status.get("containerStatuses") or []:
            if exits.get("containerName") not in (None, container.get("name")):
                continue
            code = ((container.get("state") or {}).get("terminated") or {}).get("exitCode")
            if code is None or code == 0:
                continue
            if (code in codes) == (exits.get("operator") == "In"):
                return True
    return False


def failure_action(job: JSON, pod: JSON) -> str:
    """What podFailurePolicy says of a failed Pod: the first matching rule's action, or Count."""
    for rule in ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or []:
        if _rule_matches(rule, pod):
            return str(rule.get("action", "Count"))
    return "Count"


class JobController:
    """Runs each Job's Pod, counts how it ended, and sets the Job's conditions."""

    def __init__(self, *, time_scale: float = 1.0) -> None:
        self.time_scale = time_scale
        #: By Job uid: failed Pods counted towards backoffLimit, failed Pods ignored.
        self._counted: dict[str, set[str]] = {}
        self._ignored: dict[str, set[str]] = {}
        self._fail_job: set[str] = set()
        #: Jobs whose next Pod waits out the backoff, and those whose backoff has passed.
        self._backing_off: set[str] = set()
        self._due: set[str] = set()

    def react(self, store: Store, change: Change) -> None:
        if (change.group, change.plural) == ("batch", "jobs") and change.type != "DELETED":
            meta = change.new["metadata"]
            self._sync(store, meta["namespace"], meta["name"])
        elif (change.group, change.plural) == ("", "pods"):
            meta = change.new["metadata"]
            for owner in meta.get("ownerReferences") or []:
                if owner.get("kind") == "Job" and owner.get("controller"):
                    self._sync(store, meta["namespace"], owner["name"])

    def _pods(self, store: Store, namespace: str, uid: str) -> list[JSON]:
        return [
            pod
            for key, pod in sorted(store.objects.items())
            if key[:3] == ("", "pods", namespace)
            and (pod["metadata"].get("labels") or {}).get("batch.kubernetes.io/controller-uid")
            == uid
        ]

    def _sync(self, store: Store, namespace: str, name: str) -> None:
        job = store.objects.get(("batch", "jobs", namespace, name))
        if job is None or finished(job):
            return
        uid = job["metadata"]["uid"]
        counted = self._counted.setdefault(uid, set())
        ignored = self._ignored.setdefault(uid, set())
        pods = self._pods(store, namespace, uid)
        ignored_now = False
        for pod in pods:
            pod_uid = pod["metadata"]["uid"]
            phase = (pod.get("status") or {}).get("phase")
            if phase != "Failed" or pod_uid in counted or pod_uid in ignored:
                continue
            action = failure_action(job, pod)
            if action == "Ignore":
                ignored.add(pod_uid)
                ignored_now = True
            else:
                counted.add(pod_uid)
                if action == "FailJob":
                    self._fail_job.add(uid)
        active = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
        ]
        succeeded = [p for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"]
        old = job.get("status") or {}
        conditions = [dict(c) for c in old.get("conditions") or []]
        status: JSON = {
            "startTime": old.get("startTime") or _now(),
            "active": len(active),
            "ready": sum(
                any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (p.get("status") or {}).get("conditions") or []
                )
                for p in active
            ),
            "terminating": 0,
            "succeeded": len(succeeded),
            "failed": len(counted),
            "uncountedTerminatedPods": {},
        }
        backoff_limit = int((job.get("spec") or {}).get("backoffLimit", 6))
        if succeeded:
            self._add(conditions, "SuccessCriteriaMet", "CompletionsReached")
            if not active:
                self._add(conditions, "Complete", "CompletionsReached")
                status["completionTime"] = old.get("completionTime") or _now()
        elif uid in self._fail_job or len(counted) > backoff_limit:
            reason = "PodFailurePolicy" if uid in self._fail_job else "BackoffLimitExceeded"
            self._add(conditions, "FailureTarget", reason)
            if not active:
                self._add(conditions, "Failed", reason)
        elif not active:
            self._replace(store, job, failures=0 if ignored_now else len(counted))
        status["conditions"] = conditions
        if {**old, **status} != old:
            store.set_status(JOBS, namespace, name, status)

    @staticmethod
    def _add(conditions: list[JSON], kind: str, reason: str) -> None:
        if any(c.get("type") == kind for c in conditions):
            return
        messages = {
            "CompletionsReached": "Reached expected number of succeeded pods",
            "BackoffLimitExceeded": "Job has reached the specified backoff limit",
            "PodFailurePolicy": "Pod matched a FailJob rule of the pod failure policy",
        }
        now = _now()
        conditions.append(
            {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": messages[reason],
                "lastProbeTime": now,
                "lastTransitionTime": now,
            }
        )

    def _replace(self, store: Store, job: JSON, *, failures: int) -> None:
        """A new Pod: at once for the first one and after an ignored failure, else after the
        backoff of `failures` counted failures."""
        uid = job["metadata"]["uid"]
        if uid in self._backing_off:
            return
        if failures == 0 or uid in self._due:
            self._due.discard(uid)
            self._create_pod(store, job)
            return
        self._backing_off.add(uid)
        delay = min(BACKOFF * 2 ** (failures - 1), MAX_BACKOFF) * self.time_scale
        meta = job["metadata"]

        def retry() -> None:
            self._backing_off.discard(uid)
            self._due.add(uid)
            current = store.objects.get(("batch", "jobs", meta["namespace"], meta["name"]))
            if current is not None and current["metadata"]["uid"] == uid:
                self._sync(store, meta["namespace"], meta["name"])

        store.later(delay, retry)

    def _create_pod(self, store: Store, job: JSON) -> None:
        meta = job["metadata"]
        template: Any = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        template_meta = template.get("metadata") or {}
        labels = {
            **(template_meta.get("labels") or {}),
            "batch.kubernetes.io/controller-uid": meta["uid"],
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": meta["uid"],
            "job-name": meta["name"],
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": template_meta.get("annotations") or {},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template.get("spec") or {},
        }
        store.create(store.served(*PODS), meta["namespace"], pod)


class JobTTLController:
    """Deletes a finished Job once its ttlSecondsAfterFinished has passed."""

    def __init__(self, *, time_scale: float = 1.0) -> None:
        self.time_scale = time_scale

    def react(self, store: Store, change: Change) -> None:
        if (change.group, change.plural) != ("batch", "jobs") or change.type == "DELETED":
            return
        ttl = (change.new.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None or not finished(change.new):
            return
        if change.old is not None and finished(change.old):
            return  # the timer started when it finished
        meta = change.new["metadata"]

        def expire() -> None:
            current = store.objects.get(("batch", "jobs", meta["namespace"], meta["name"]))
            if current is not None and current["metadata"]["uid"] == meta["uid"]:
                # ttlafterfinished_controller.go deletes with foreground propagation.
                jobs = store.served(*JOBS)
                kube_lifecycle.delete(store, jobs, meta["namespace"], meta["name"], "Foreground")

        store.later(float(ttl) * self.time_scale, expire)
