"""Where the emulator's Pods land and how they run: a scheduler, a kubelet, admission, Jobs.

Tests switch these on (`start`) instead of writing the statuses kube-scheduler and the
kubelet would write: the `Scheduler` below, the kubelet (`kube_kubelet`), the admission
plugins that refuse Pods (`kube_admission`), and the Job and TTL-after-finished controllers
(`kube_jobs`). Each follows its upstream counterpart as far as hooksvc's steps depend on it:

- `Scheduler` (kube-scheduler): binds a new Pod to a Node whose `NoSchedule` and
  `NoExecute` taints it tolerates, with the matching rules of
  https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/; when none
  fits, `PodScheduled` is False with reason `Unschedulable`, and the Pod is tried again
  when a Node changes.

Kubernetes' durations are multiplied by `time_scale`, so that a test sees a 10 s backoff in
milliseconds. Everything here runs in the emulator's loop; `Workloads` is the thread-safe
face tests hold.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from tests.support import kube_admission, kube_events, kube_jobs
from tests.support.kube import KubeEmulator
from tests.support.kube_kubelet import Kubelet, RuntimeFailure, Script
from tests.support.kube_semantics import JSON, ApiError
from tests.support.kube_store import Change, Store

__all__ = ["RuntimeFailure", "Script", "Workloads", "node", "start", "tolerates"]

PODS = ("", "v1", "pods")
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, taints: Iterable[JSON] = ()) -> JSON:
    """A Ready Node, with `taints` ({key, value, effect})."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": list(taints)},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def tolerates(toleration: JSON, taint: JSON) -> bool:
    """One toleration against one taint, as the taint-and-toleration page defines matching."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        # An empty key with Exists matches every taint.
        return operator == "Exists"
    if toleration["key"] != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def _pod_key(pod: JSON) -> tuple[str, str]:
    return pod["metadata"]["namespace"], pod["metadata"]["name"]


def _patch_spec(store: Store, pod: JSON, spec: JSON) -> None:
    res = store.served(*PODS)
    namespace, name = _pod_key(pod)
    store.patch(
        res,
        namespace,
        name,
        status_only=False,
        content_type="application/merge-patch+json",
        raw=json.dumps({"spec": spec}).encode(),
        field_manager="kube-scheduler",
    )


class Scheduler:
    """Binds Pods to Nodes whose taints they tolerate, or marks them Unschedulable."""

    def react(self, store: Store, change: Change) -> None:
        if change.group or change.type == "DELETED":
            return
        if change.plural == "nodes":
            for key, pod in list(store.objects.items()):
                if key[:2] == ("", "pods") and not (pod.get("spec") or {}).get("nodeName"):
                    self._schedule(store, pod)
        elif change.plural == "pods" and change.type == "ADDED":
            self._schedule(store, change.new)

    def _schedule(self, store: Store, pod: JSON) -> None:
        if (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
            return
        nodes = [obj for key, obj in sorted(store.objects.items()) if key[:2] == ("", "nodes")]
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        refused: dict[str, int] = {}
        for candidate in nodes:
            blocking = [
                t
                for t in (candidate.get("spec") or {}).get("taints") or []
                if t.get("effect") in _BLOCKING_EFFECTS
                and not any(tolerates(tol, t) for tol in tolerations)
            ]
            if not blocking:
                _patch_spec(store, pod, {"nodeName": candidate["metadata"]["name"]})
                store.set_status(
                    PODS,
                    *_pod_key(pod),
                    {
                        "phase": "Pending",
                        "conditions": [
                            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}
                        ],
                    },
                )
                return
            taint = blocking[0]
            reason = f"had untolerated taint {{{taint['key']}: {taint.get('value') or ''}}}"
            refused[reason] = refused.get(reason, 0) + 1
        total = len(nodes)
        if total:
            reasons = ", ".join(f"{n} node(s) {r}" for r, n in sorted(refused.items()))
            message = (
                f"0/{total} nodes are available: {reasons}. preemption: 0/{total} nodes are"
                f" available: {total} Preemption is not helpful for scheduling."
            )
        else:
            message = "no nodes available to schedule pods"
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": now(),
        }
        current = (pod.get("status") or {}).get("conditions") or []
        if [c.get("message") for c in current] != [message]:
            store.set_status(PODS, *_pod_key(pod), {"phase": "Pending", "conditions": [condition]})


class Workloads:
    """The controllers a test switched on, and what the test does to the Pods they run."""

    def __init__(self, kube: KubeEmulator, kubelet: Kubelet) -> None:
        self.kube = kube
        self.kubelet = kubelet

    def runtime_fails(self, image: str, failure: RuntimeFailure | None) -> None:
        """The container runtime fails containers of `image` from now on (None: no more)."""
        if failure is None:
            self.kube.in_loop(self.kubelet.runtime_failures.pop, image, None)
        else:
            self.kube.in_loop(self.kubelet.runtime_failures.__setitem__, image, failure)

    def events(self, namespace: str, uid: str, reason: str = "") -> list[JSON]:
        """The Events about the object `uid` (of `reason` if given), oldest first."""
        found = [
            event
            for event in self.kube.list_objects(*kube_events.EVENTS, namespace)
            if (event.get("involvedObject") or {}).get("uid") == uid
            and reason in ("", event.get("reason"))
        ]
        return sorted(found, key=lambda e: (e.get("firstTimestamp", ""), e["metadata"]["name"]))

    def unpullable(self, image: str, refused: bool = True) -> None:
        """Pulls of `image` fail from now on (or succeed again: `refused=False`)."""
        action = self.kubelet.unpullable.add if refused else self.kubelet.unpullable.discard
        self.kube.in_loop(action, image)

    def script(self, image: str, script: Script) -> None:
        """Containers of `image` started from now on run `script`."""
        self.kube.in_loop(self.kubelet.scripts.__setitem__, image, script)

    def exit(
        self, namespace: str, pod: str, container: str, exit_code: int = 0, log: str = ""
    ) -> None:
        """The process of a running container ends, having printed `log`."""
        self.kube.in_loop(self.kubelet.exit, namespace, pod, container, exit_code, log)

    def disrupt(self, namespace: str, pod: str) -> None:
        self.kube.in_loop(self.kubelet.disrupt, namespace, pod)

    def pod(self, namespace: str, name: str) -> JSON:
        found = self.kube.get_object(*PODS, namespace, name)
        if found is None:
            raise LookupError(f"no Pod {namespace}/{name}")
        return found

    def wait(self, what: str, condition: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Poll `condition` until it returns something true; its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                found = condition()
            except (LookupError, ApiError):
                found = None
            if found:
                return found
            time.sleep(0.01)
        raise AssertionError(f"timed out waiting for {what}")

    def waiting_reason(self, namespace: str, pod: str, container: str) -> str:
        for status in (self.pod(namespace, pod).get("status") or {}).get("containerStatuses") or []:
            if status["name"] == container:
                return str(((status.get("state") or {}).get("waiting") or {}).get("reason", ""))
        return ""


def start(
    kube: KubeEmulator, *, nodes: Iterable[JSON] | None = None, time_scale: float = 0.01
) -> Workloads:
    """Nodes (one untainted worker by default), the scheduler, the kubelet, the admission
    plugins that refuse Pods (and the `default` ServiceAccounts), and the Job controllers."""
    for obj in nodes if nodes is not None else [node("worker-1")]:
        kube.put_object(obj)
    kube.declare(*kube_admission.QUOTAS, namespaced=True)
    kubelet = Kubelet(time_scale=time_scale)
    kube.add_controller(kube_admission.ServiceAccounts())
    kube.add_controller(kube_admission.ResourceQuotas())
    kube.add_controller(Scheduler())
    kube.add_controller(kubelet)
    kube.add_controller(kube_jobs.JobController(time_scale=time_scale))
    kube.add_controller(kube_jobs.JobTTLController(time_scale=time_scale))
    return Workloads(kube, kubelet)
