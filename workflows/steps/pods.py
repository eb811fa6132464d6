"""Pods that waiting will not start: what `conformance` and `k8s_job` give up on after a grace.

Hydrophone aborts a conformance run when a container of its Pod waits with one of the
kubelet's failure reasons (kubernetes-sigs/hydrophone pkg/common/pod.go,
`containerErrorReasons`); without that, a step polls until its timeout (two hours for
conformance) for an image that will never be pulled. The reasons are the kubelet's
(kubernetes pkg/kubelet/images/types.go; `CrashLoopBackOff` from the container runtime
manager), and a Pod kube-scheduler cannot place has the condition `PodScheduled` False with
reason `Unschedulable`. Some of these resolve by themselves (a registry that was briefly
down, a Node the autoscaler adds), so a step fails only when the trouble lasted
`grace` seconds without a break, measured on this process's clock (`clock`, which tests
move).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, MutableMapping
from typing import Any

#: Waiting reasons of a container that will not start by itself, and what they mean.
WAITING = {
    "ErrImagePull": "cannot pull its image",
    "ImagePullBackOff": "cannot pull its image",
    "InvalidImageName": "has an invalid image name",
    "ErrImageNeverPull": "has no image and may not pull one",
    "CrashLoopBackOff": "keeps crashing",
}
#: What the kubelet or the scheduler said, kept in the output (never in a message).
DETAIL_CHARS = 500

clock: Callable[[], float] = time.time


@dataclasses.dataclass(frozen=True)
class Trouble:
    """Why a Pod does not start: a waiting reason of a container, or `Unschedulable`."""

    reason: str
    #: The container, "" when the Pod itself cannot be placed.
    container: str = ""
    detail: str = ""

    def describe(self) -> str:
        """Deterministic words for a message: no kubelet or scheduler text."""
        if not self.container:
            return f"the Pod cannot be scheduled ({self.reason})"
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


def stuck(memo: MutableMapping[str, Any], found: Trouble | None, grace: float) -> bool:
    """True once trouble has been seen without a break for `grace` seconds.

    `memo["troubleSince"]` keeps when it was first seen; a poll without trouble clears it.
    """
    if found is None:
        memo.pop("troubleSince", None)
        return False
    since = float(memo.setdefault("troubleSince", clock()))
    return clock() - since >= grace
