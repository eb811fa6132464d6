"""The Job controller and the TTL-after-finished controller of the Kubernetes API emulator.

Switched on by `kube_workloads.start`. `JobController` follows kube-controller-manager's Job
controller as Kubernetes v1.33 runs it (kubernetes pkg/controller/job/job_controller.go,
read at commit 6ae037f1: `syncJob`, `manageJob`, `trackJobStatusAndRemoveFinalizers`,
`enactJobFinished`; backoff_utils.go; pod_failure_policy.go; the feature gates that delay
the terminal conditions, JobPodReplacementPolicy and JobManagedBy, on by default), for
the non-indexed Jobs hooksvc makes:

- Pods are made from the template (generateName `<job>-`, the labels
  `batch.kubernetes.io/job-name`, `job-name`, `batch.kubernetes.io/controller-uid`,
  `controller-uid`, a controller ownerReference and the `batch.kubernetes.io/job-tracking`
  finalizer) while fewer than `parallelism` (and the completions left) are active. Each
  create is recorded as an Event on the Job (controller_utils.go `RealPodControl`):
  `SuccessfulCreate` ("Created pod: <name>"), or, when the API server refuses the Pod
  (admission: a missing ServiceAccount, a quota, ...), `FailedCreate` ("Error creating:
  <its message>"). A refused create sets no condition: the sync fails and is tried again
  with the work queue's backoff (1 s doubling to 60 s), for as long as it takes.
- A failed Pod's replacement waits 10 s doubling to 10 minutes from the last failure,
  counting every failure since the last success, ignored ones too (backoff_utils.go).
- A Pod is counted once it ended (Succeeded, or Failed; with a podFailurePolicy a Pod being
  deleted counts only once Failed): its uid goes to `status.uncountedTerminatedPods`, its
  finalizer is removed, then `succeeded` or `failed` grows. `active`, `ready` and
  `terminating` (deleted, not ended) are written at every sync.
- `failed` past `backoffLimit` (default 6) gives `FailureTarget` with reason
  `BackoffLimitExceeded`; `activeDeadlineSeconds` since `startTime`, `DeadlineExceeded`; a
  `FailJob` rule of `podFailurePolicy`, `PodFailurePolicy` with the rule's message. Active
  Pods are then deleted (`SuccessfulDelete`), and the terminal `Failed` (same reason and
  message, and a Warning Event) follows once no Pod is terminating or uncounted. Enough
  successes give `SuccessCriteriaMet` (reason `CompletionsReached`), then `Complete` with
  `completionTime` and a `Completed` Event, on the same rule. `suspend` deletes active Pods.
- podFailurePolicy rules are matched in order against a failed Pod (a rule's `onExitCodes`,
  else its `onPodConditions`): `Ignore` does not count it, `FailJob` fails the Job, `Count`
  is the default handling.

`JobTTLController` deletes a Job `ttlSecondsAfterFinished` after it got `Complete` or
`Failed` (pkg/controller/ttlafterfinished/ttlafterfinished_controller.go), with foreground
propagation.

Not modelled: the 1 s batching of Pod events (a sync follows every change), expectations
(a created Pod is seen at once), indexed Jobs, success policies, `managedBy`. Kubernetes'
durations are multiplied by `time_scale`, as in `kube_workloads`.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import time
from typing import Any

from tests.support import kube_events, kube_lifecycle
from tests.support.kube_semantics import JSON, ApiError
from tests.support.kube_store import Change, Store

JOBS = ("batch", "v1", "jobs")
PODS = ("", "v1", "pods")
TRACKING = "batch.kubernetes.io/job-tracking"
COMPONENT = "job-controller"
#: DefaultJobPodFailureBackOff, MaxJobPodFailureBackOff.
BACKOFF, MAX_BACKOFF = 10.0, 600.0
#: DefaultJobApiBackOff, MaxJobApiBackOff: the work queue's backoff after a failed sync.
API_BACKOFF, MAX_API_BACKOFF = 1.0, 60.0
_TERMINAL = ("Complete", "Failed")
_MESSAGES = {
    "BackoffLimitExceeded": "Job has reached the specified backoff limit",
    "DeadlineExceeded": "Job was active longer than specified deadline",
}
_COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")


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


def _phase(pod: JSON) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _ended(pod: JSON) -> bool:
    return _phase(pod) in ("Succeeded", "Failed")


def _deleted(pod: JSON) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _tracked(pod: JSON) -> bool:
    return TRACKING in (pod["metadata"].get("finalizers") or [])


def _ready(pod: JSON) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _only_replace_failed(job: JSON) -> bool:
    spec = job.get("spec") or {}
    return bool(spec.get("podFailurePolicy")) or spec.get("podReplacementPolicy") == "Failed"


def is_failed(pod: JSON, job: JSON) -> bool:
    """isPodFailed: Failed; or, unless only failed Pods are replaced, deleted and not Succeeded."""
    if _phase(pod) == "Failed":
        return True
    return not _only_replace_failed(job) and _deleted(pod) and _phase(pod) != "Succeeded"


def _exit_match(rule: JSON, pod: JSON) -> JSON | None:
    exits = rule["onExitCodes"]
    codes = set(exits.get("values") or [])
    status = pod.get("status") or {}
    statuses = [
        *(status.get("containerStatuses") or []),
        *(status.get("initContainerStatuses") or []),
    ]
    for container in statuses:
        if exits.get("containerName") not in (None, container.get("name")):
            continue
        code = ((container.get("state") or {}).get("terminated") or {}).get("exitCode")
        if code and (code in codes) == (exits.get("operator") == "In"):
            return dict(container)
    return None


def match_policy(job: JSON, pod: JSON) -> tuple[str | None, bool]:
    """matchPodFailurePolicy: the FailJob message (or None), and whether the failure counts."""
    meta = pod["metadata"]
    rules = ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or []
    for index, rule in enumerate(rules):
        action = rule.get("action", "Count")
        message = ""
        if rule.get("onExitCodes") is not None:
            container = _exit_match(rule, pod)
            if container is None:
                continue
            code = container["state"]["terminated"]["exitCode"]
            message = (
                f"Container {container['name']} for pod {meta['namespace']}/{meta['name']} failed"
                f" with exit code {code} matching {action} rule at index {index}"
            )
        elif rule.get("onPodConditions") is not None:
            wanted = {(p.get("type"), p.get("status") or "True") for p in rule["onPodConditions"]}
            found = [
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if (c.get("type"), c.get("status")) in wanted
            ]
            if not found:
                continue
            message = (
                f"Pod {meta['namespace']}/{meta['name']} has condition {found[0]['type']}"
                f" matching {action} rule at index {index}"
            )
        else:
            continue
        if action == "Ignore":
            return None, False
        return (message if action == "FailJob" else None), True
    return None, True


@dataclasses.dataclass
class _JobState:
    """What the controller keeps in memory per Job, as its backoff store and queue do."""

    failures: int = 0
    last_failure: float = 0.0
    api_failures: int = 0
    started: float | None = None


@dataclasses.dataclass
class _Sync:
    """One sync's view of a Job (syncJobCtx)."""

    job: JSON
    pods: list[JSON]
    status: JSON
    finished: tuple[str, str, str] | None = None
    terminating: int = 0


class JobController:
    """Runs each Job's Pods, counts how they ended, and sets the Job's conditions."""

    def __init__(self, *, time_scale: float = 1.0) -> None:
        self.time_scale = time_scale
        self._state: dict[str, _JobState] = {}

    def react(self, store: Store, change: Change) -> None:
        meta = change.new["metadata"]
        if (change.group, change.plural) == ("batch", "jobs"):
            if change.type == "DELETED":
                # deleteJob -> cleanupPodFinalizers: the Pods may go.
                self._release(store, self._pods(store, meta["namespace"], meta["uid"]))
                self._state.pop(meta["uid"], None)
            else:
                self._sync(store, meta["namespace"], meta["name"])
        elif (change.group, change.plural) == ("", "pods"):
            for owner in meta.get("ownerReferences") or []:
                if owner.get("kind") == "Job" and owner.get("controller"):
                    self._sync(store, meta["namespace"], owner["name"])

    @staticmethod
    def _pods(store: Store, namespace: str, uid: str) -> list[JSON]:
        return [
            pod
            for key, pod in sorted(store.objects.items())
            if key[:3] == ("", "pods", namespace)
            and any(
                o.get("uid") == uid and o.get("controller")
                for o in pod["metadata"].get("ownerReferences") or []
            )
        ]

    def _later(self, store: Store, job: JSON, seconds: float) -> None:
        meta = job["metadata"]

        def again() -> None:
            current = store.objects.get(("batch", "jobs", meta["namespace"], meta["name"]))
            if current is not None and current["metadata"]["uid"] == meta["uid"]:
                self._sync(store, meta["namespace"], meta["name"])

        store.later(seconds * self.time_scale, again)

    def _sync(self, store: Store, namespace: str, name: str) -> None:
        found = store.objects.get(("batch", "jobs", namespace, name))
        if found is None:
            return
        job: JSON = found
        uid = job["metadata"]["uid"]
        pods = self._pods(store, namespace, uid)
        if finished(job):
            self._release(store, pods)
            return
        state = self._state.setdefault(uid, _JobState())
        spec = job.get("spec") or {}
        sync = _Sync(job=job, pods=pods, status=copy.deepcopy(job.get("status") or {}))
        status = sync.status
        uncounted = status.setdefault("uncountedTerminatedPods", {})
        seen = set(uncounted.get("succeeded") or []) | set(uncounted.get("failed") or [])
        fresh = [p for p in pods if _tracked(p) and p["metadata"]["uid"] not in seen]
        new_succeeded = [p for p in fresh if _phase(p) == "Succeeded"]
        new_failed = [p for p in fresh if is_failed(p, job)]
        succeeded = int(status.get("succeeded") or 0) + len(new_succeeded)
        succeeded += len(uncounted.get("succeeded") or [])
        failed = int(status.get("failed") or 0) + sum(match_policy(job, p)[1] for p in new_failed)
        failed += len(uncounted.get("failed") or [])
        suspended = bool(spec.get("suspend"))
        if not status.get("startTime") and not suspended:
            status["startTime"] = _now()
        if state.started is None:
            state.started = time.monotonic()
        self._note_backoff(state, new_succeeded, new_failed)
        active = [p for p in pods if not _ended(p) and not _deleted(p)]
        sync.terminating = sum(1 for p in pods if _deleted(p) and not _ended(p))
        sync.finished, recheck = self._finished(sync, state, failed)
        if recheck is not None:
            self._later(store, job, recheck)  # when activeDeadlineSeconds will have passed
        ready = sum(_ready(p) for p in active)
        retry = False
        if sync.finished is not None:
            for pod in active:
                self._delete_pod(store, job, pod)
            sync.terminating += len(active)
            ready, active = 0, []
        else:
            active, retry = self._manage(store, sync, state, active, succeeded)
            completions = spec.get("completions")
            if completions is None and spec.get("parallelism") is None:
                completions = 1  # the API's defaults for a Job that sets neither
            enough = succeeded > 0 if completions is None else succeeded >= int(completions)
            if enough and not active:
                sync.finished = ("SuccessCriteriaMet", *_COMPLETIONS_REACHED)
        status.update(active=len(active), ready=ready, terminating=sync.terminating)
        self._track(store, sync)
        if retry:
            state.api_failures += 1
            delay = min(API_BACKOFF * 2 ** (state.api_failures - 1), MAX_API_BACKOFF)
            self._later(store, job, delay)
        else:
            state.api_failures = 0

    @staticmethod
    def _note_backoff(state: _JobState, succeeded: list[JSON], failed: list[JSON]) -> None:
        """newBackoffRecord: failures since the last success, and when the last one was seen."""
        if succeeded:
            state.failures, state.last_failure = 0, 0.0
        elif failed:
            state.failures += len(failed)
            state.last_failure = time.monotonic()

    def _finished(
        self, sync: _Sync, state: _JobState, failed: int
    ) -> tuple[tuple[str, str, str] | None, float | None]:
        """The condition the Job is to get, as syncJob decides it before managing Pods, and
        in how many (unscaled) seconds to look again for its active deadline."""
        job, spec = sync.job, sync.job.get("spec") or {}
        if found := condition(job, "SuccessCriteriaMet"):
            return ("SuccessCriteriaMet", found.get("reason", ""), found.get("message", "")), None
        if found := condition(job, "FailureTarget"):
            return ("Failed", found.get("reason", ""), found.get("message", "")), None
        for pod in sync.pods:
            if is_failed(pod, job) and (message := match_policy(job, pod)[0]):
                return ("FailureTarget", "PodFailurePolicy", message), None
        if failed > int(spec.get("backoffLimit", 6)):
            reason = "BackoffLimitExceeded"
            return ("FailureTarget", reason, _MESSAGES[reason]), None
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and not spec.get("suspend") and state.started is not None:
            left = float(deadline) * self.time_scale - (time.monotonic() - state.started)
            if left <= 0:
                return ("FailureTarget", "DeadlineExceeded", _MESSAGES["DeadlineExceeded"]), None
            return None, left / self.time_scale
        return None, None

    def _manage(
        self, store: Store, sync: _Sync, state: _JobState, active: list[JSON], succeeded: int
    ) -> tuple[list[JSON], bool]:
        """manageJob: the active Pods after creating or deleting some; True when a create failed."""
        job, spec = sync.job, sync.job.get("spec") or {}
        if spec.get("suspend"):
            for pod in active:
                self._delete_pod(store, job, pod)
            sync.terminating += len(active)
            return [], False
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        if completions is None and spec.get("parallelism") is None:
            completions = 1
        if completions is None:
            wanted = len(active) if succeeded > 0 else parallelism
        else:
            wanted = max(0, min(int(completions) - succeeded, parallelism))
        if len(active) > wanted:
            for pod in active[wanted:]:
                self._delete_pod(store, job, pod)
            sync.terminating += len(active) - wanted
            return active[:wanted], False
        pending = sync.terminating if _only_replace_failed(job) else 0
        missing = wanted - pending - len(active)
        if missing <= 0:
            return active, False
        if state.failures:
            wait = min(BACKOFF * 2 ** (state.failures - 1), MAX_BACKOFF) * self.time_scale
            left = wait - (time.monotonic() - state.last_failure)
            if left > 0:
                self._later(store, job, max(left / self.time_scale, 1.0))
                return active, False
        created = list(active)
        for _ in range(missing):
            new = self._create_pod(store, job)
            if new is None:
                return created, True
            created.append(new)
        return created, False

    def _create_pod(self, store: Store, job: JSON) -> JSON | None:
        """RealPodControl.CreatePods: the new Pod, or None (a FailedCreate Event) if refused."""
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
                "finalizers": [*(template_meta.get("finalizers") or []), TRACKING],
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
        try:
            created = store.create(store.served(*PODS), meta["namespace"], pod)
        except ApiError as exc:
            causes = (exc.details or {}).get("causes") or []
            if not any(c.get("reason") == "NamespaceTerminating" for c in causes):
                self._event(store, job, "Warning", "FailedCreate", f"Error creating: {exc.message}")
            return None
        name = created["metadata"]["name"]
        self._event(store, job, "Normal", "SuccessfulCreate", f"Created pod: {name}")
        return created

    def _delete_pod(self, store: Store, job: JSON, pod: JSON) -> None:
        meta = pod["metadata"]
        try:
            kube_lifecycle.delete(store, store.served(*PODS), meta["namespace"], meta["name"])
        except ApiError:
            return
        self._event(store, job, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}")

    @staticmethod
    def _event(store: Store, job: JSON, kind: str, reason: str, message: str) -> None:
        shown = {**job, "apiVersion": "batch/v1", "kind": "Job"}
        kube_events.record(
            store,
            shown,
            type="Warning" if kind == "Warning" else "Normal",
            reason=reason,
            message=message,
            component=COMPONENT,
        )

    @staticmethod
    def _count(sync: _Sync) -> tuple[list[JSON], list[str], list[str]]:
        """The Pods whose finalizer may go, and the uncounted succeeded and failed uids."""
        job, uncounted = sync.job, sync.status["uncountedTerminatedPods"]
        done_succeeded = list(uncounted.get("succeeded") or [])
        done_failed = list(uncounted.get("failed") or [])
        releasing: list[JSON] = []
        fails_all = sync.finished is not None and sync.finished[0] != "SuccessCriteriaMet"
        for pod in sync.pods:
            uid = pod["metadata"]["uid"]
            if not _tracked(pod) or uid in done_succeeded or uid in done_failed:
                continue
            failed = is_failed(pod, job)
            if not (sync.finished is not None or _phase(pod) == "Succeeded" or failed):
                continue
            releasing.append(pod)
            if _phase(pod) == "Succeeded":
                done_succeeded.append(uid)
            elif (failed or fails_all) and match_policy(job, pod)[1]:
                # When the Job is finished, every Pod not ended counts as failed.
                done_failed.append(uid)
        return releasing, done_succeeded, done_failed

    def _track(self, store: Store, sync: _Sync) -> None:
        """trackJobStatusAndRemoveFinalizers, then enactJobFinished."""
        job, status = sync.job, sync.status
        releasing, done_succeeded, done_failed = self._count(sync)
        conditions = status.setdefault("conditions", [])
        final = sync.finished
        if final is not None and final[0] == "FailureTarget":
            conditions.append(self._condition("FailureTarget", final[1], final[2]))
            final = ("Failed", final[1], final[2])
        if final is not None and final[0] == "SuccessCriteriaMet":
            if not any(c.get("type") == "SuccessCriteriaMet" for c in conditions):
                conditions.append(self._condition(*final))
            final = ("Complete", final[1], final[2])
        status["uncountedTerminatedPods"] = {
            key: uids
            for key, uids in (("succeeded", done_succeeded), ("failed", done_failed))
            if uids
        }
        self._write(store, job, status)
        self._release(store, releasing)
        removed = {p["metadata"]["uid"] for p in releasing}
        status["succeeded"] = int(status.get("succeeded") or 0) + len(
            [u for u in done_succeeded if u in removed]
        )
        status["failed"] = int(status.get("failed") or 0) + len(
            [u for u in done_failed if u in removed]
        )
        left = {
            "succeeded": [u for u in done_succeeded if u not in removed],
            "failed": [u for u in done_failed if u not in removed],
        }
        status["uncountedTerminatedPods"] = {k: v for k, v in left.items() if v}
        ended = final is not None and not any(left.values()) and not sync.terminating
        if ended and final is not None:
            conditions.append(self._condition(*final))
            if final[0] == "Complete":
                status["completionTime"] = _now()
        self._write(store, job, status)
        if ended and final is not None:
            if final[0] == "Complete":
                self._event(store, job, "Normal", "Completed", "Job completed")
            else:
                self._event(store, job, "Warning", final[1], final[2])

    @staticmethod
    def _condition(kind: str, reason: str, message: str) -> JSON:
        now = _now()
        return {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastProbeTime": now,
            "lastTransitionTime": now,
        }

    @staticmethod
    def _write(store: Store, job: JSON, status: JSON) -> None:
        meta = job["metadata"]
        current = store.objects.get(("batch", "jobs", meta["namespace"], meta["name"]))
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return
        new = copy.deepcopy(current)
        new["status"] = copy.deepcopy(status)
        store.write(store.served(*JOBS), new)

    @staticmethod
    def _release(store: Store, pods: list[JSON]) -> None:
        """Remove the tracking finalizer (a deleted Pod may then go)."""
        for pod in pods:
            meta = pod["metadata"]
            current = store.objects.get(("", "pods", meta["namespace"], meta["name"]))
            if current is None or not _tracked(current):
                continue
            new = copy.deepcopy(current)
            kept = [f for f in new["metadata"].get("finalizers") or [] if f != TRACKING]
            if kept:
                new["metadata"]["finalizers"] = kept
            else:
                new["metadata"].pop("finalizers", None)
            store.write(store.served(*PODS), new)


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
