"""Pods that waiting will not start: what `conformance` and `k8s_job` give up on after a grace.

A Pod can fail to start in three places, and nothing ends it by itself in any of them:

- The API server refuses to create it (admission: a missing ServiceAccount, an exceeded
  quota, a policy). The Job controller then records a `FailedCreate` Event on its Job and
  sets no condition (kubernetes pkg/controller/job/job_controller.go `manageJob`,
  controller_utils.go `RealPodControl`); a step that creates its Pod itself gets the 403.
- kube-scheduler cannot place it: `PodScheduled` False with reason `Unschedulable`.
- The kubelet cannot start a container, which then waits with the reason: its image
  (pkg/kubelet/images/types.go: `ErrImagePull`, `ImagePullBackOff`, `InvalidImageName`,
  `ErrImageNeverPull`), its config (`CreateContainerConfigError`: a Secret or ConfigMap it
  needs is missing), the runtime (`CreateContainerError`, `RunContainerError`; all three
  from pkg/kubelet/kuberuntime/kuberuntime_container.go `startContainer`), or it keeps
  crashing (`CrashLoopBackOff`).

Hydrophone aborts a conformance run on some of these (kubernetes-sigs/hydrophone
pkg/common/pod.go, `containerErrorReasons`); without that, a step polls until its timeout
(two hours for conformance) for an image that will never be pulled. Each of them can also
resolve by itself (a registry briefly down, a Node the autoscaler adds, a Secret another
step creates, a quota freed), so a step fails only when the trouble lasted `grace` seconds
without a break, measured on the project's clock (workflows.clock, which tests hold). The steps'
default, 300 s (`stuckGraceSeconds`), outlasts the retries that could end it: the Job
controller tries a refused create again at least every 60 s (MaxJobApiBackOff), the kubelet
a config or create error every 10 s (pod_workers.go) and a pull at least every 300 s
(MaxContainerBackOff), so at least one try after the longest backoff falls in the grace.

`log` reads a container's log for a step's output: a container that never ran has none,
and the kubelet answers that with a 400 (pkg/kubelet/kubelet_pods.go,
`validateContainerLogStatus`), which is no reason to fail a step.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import MutableMapping
from typing import Any

from workflows import clock
from workflows.kube import k8s

#: Waiting reasons of a container that will not start by itself, and what they mean.
WAITING = {
    "ErrImagePull": "cannot pull its image",
    "ImagePullBackOff": "cannot pull its image",
    "InvalidImageName": "has an invalid image name",
    "ErrImageNeverPull": "has no image and may not pull one",
    "CreateContainerConfigError": "cannot be configured",
    "CreateContainerError": "cannot be created by the container runtime",
    "RunContainerError": "cannot be started by the container runtime",
    "CrashLoopBackOff": "keeps crashing",
}
#: A Pod still Pending for no reason above (its sandbox, a volume, a slow pull): a step that
#: bounds its Pod's start as a whole, as Hydrophone does, calls that trouble too.
PENDING = "Pending"
#: Reasons of a Pod, rather than of one of its containers.
POD_REASONS = {
    "Unschedulable": "cannot be scheduled",
    "FailedCreate": "cannot be created",
    PENDING: "has not started",
}
#: What the API server, the kubelet or the scheduler said, kept in the output (never in a
#: message).
DETAIL_CHARS = 500


@dataclasses.dataclass(frozen=True)
class Trouble:
    """Why a Pod does not start: a waiting reason of a container, or a reason of the Pod."""

    reason: str
    #: The container, "" when the Pod itself cannot be created or placed.
    container: str = ""
    detail: str = ""

    def describe(self) -> str:
        """Deterministic words for a message: no API server, kubelet or scheduler text."""
        if not self.container:
            return f"the Pod {POD_REASONS[self.reason]} ({self.reason})"
        return f"container {self.container} {WAITING[self.reason]} ({self.reason})"

    def output(self) -> dict[str, str]:
        found = {"reason": self.reason, "detail": self.detail[:DETAIL_CHARS]}
        return {"container": self.container, **found} if self.container else found


def trouble(pod: dict[str, Any]) -> Trouble | None:
    """The first reason `pod` will not start by waiting, or None."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return None
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return Trouble("Unschedulable", detail=str(condition.get("message") or ""))
    kinds = ("initContainerStatuses", "containerStatuses")
    for container in [c for kind in kinds for c in status.get(kind) or []]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in WAITING:
            return Trouble(
                str(waiting["reason"]),
                str(container.get("name", "")),
                str(waiting.get("message") or ""),
            )
    return None


def not_started(pod: dict[str, Any]) -> Trouble | None:
    """`PENDING` while `pod` is Pending, with its containers' waiting reasons as the detail."""
    status = pod.get("status") or {}
    if (status.get("phase") or PENDING) != PENDING:
        return None
    kinds = ("initContainerStatuses", "containerStatuses")
    waiting = [
        f"{c.get('name', '')}: {((c.get('state') or {}).get('waiting') or {}).get('reason')}"
        for kind in kinds
        for c in status.get(kind) or []
        if (c.get("state") or {}).get("waiting")
    ]
    return Trouble(PENDING, detail="; ".join(waiting))


def refused(error: k8s.K8sError) -> Trouble:
    """A Pod create the API server refused, with its own message kept as the detail.

    k8s keeps response bodies out of its errors' text (they reach CAPI); the output may
    hold what admission said, which is what an operator needs to act.
    """
    body = getattr(error.__cause__, "body", None)
    try:
        detail = str(json.loads(body or "{}").get("message") or "")
    except (TypeError, ValueError, AttributeError):
        detail = ""
    return Trouble("FailedCreate", detail=detail)


def stuck(memo: MutableMapping[str, Any], found: Trouble | None, grace: float) -> bool:
    """True once trouble has been seen without a break for `grace` seconds.

    `memo["troubleSince"]` keeps when it was first seen; a poll without trouble clears it.
    """
    if found is None:
        memo.pop("troubleSince", None)
        return False
    since = float(memo.setdefault("troubleSince", clock.epoch()))
    return clock.epoch() - since >= grace


def log(api: k8s.ApiClient, namespace: str, pod: str, *, what: str, **options: Any) -> str:
    """A container's log (`options` as read_namespaced_pod_log takes them); "" when the Pod
    is gone or the container never ran."""
    try:
        text = k8s.call(k8s.core(api).read_namespaced_pod_log, pod, namespace, what=what, **options)
    except k8s.NotFound:
        return ""
    except k8s.Invalid as exc:
        if exc.status != 400:
            raise
        return ""  # "container ... is waiting to start" / "is terminated": nothing ran
    return str(text or "")
