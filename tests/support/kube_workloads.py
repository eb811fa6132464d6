"""Where the emulator's Pods land and how they run: a scheduler and a kubelet as controllers.

Tests switch these on (`start`, which adds the Job controllers of `kube_jobs` too) instead
of writing the statuses kube-scheduler and the kubelet would write. Each follows its
upstream counterpart as far as hooksvc's steps depend on it:

- `Scheduler` (kube-scheduler): binds a new Pod to a Node whose `NoSchedule` and
  `NoExecute` taints it tolerates, with the matching rules of
  https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/; when none
  fits, `PodScheduled` is False with reason `Unschedulable`, and the Pod is tried again
  when a Node changes.
- `Kubelet`: for a bound Pod, pulls each container's image. An image a test marks
  unpullable gives the waiting reason `ErrImagePull` (with the runtime's error), then
  `ImagePullBackOff` ("Back-off pulling image ...") until the next pull, with the backoff
  doubling from 10 s up to 300 s (kubernetes pkg/kubelet/images/image_manager.go). A
  pulled container runs until the test ends it (`Workloads.exit`) or a script for its
  image does; it is restarted as `restartPolicy` says, waiting in `CrashLoopBackOff` in
  between. The phase follows the pod lifecycle
  (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/): Pending while a
  container waits to start, Running, then Succeeded or Failed once every container of a
  `Never` (or, on success, `OnFailure`) Pod ended. Container statuses are sorted by name,
  as the kubelet sorts them. `disrupt` plays an eviction: the `DisruptionTarget` condition
  (https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions)
  and containers killed with exit code 137.

Kubernetes' durations are multiplied by `time_scale`, so that a test sees a 10 s backoff in
milliseconds. Everything here runs in the emulator's loop; `Workloads` is the thread-safe
face tests hold.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from tests.support import kube_jobs
from tests.support.kube import KubeEmulator
from tests.support.kube_semantics import JSON, ApiError
from tests.support.kube_store import Change, Store

PODS = ("", "v1", "pods")
#: The kubelet's image pull backoff: 10 s doubling up to 300 s (MaxContainerBackOff).
PULL_BACKOFF, MAX_BACKOFF = 10.0, 300.0
#: How long after a failed pull the kubelet's next sync shows ImagePullBackOff.
SYNC_SECONDS = 1.0
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


@dataclasses.dataclass(frozen=True)
class Script:
    """What a container of an image does once it runs: prints `log`, exits after `seconds`."""

    exit_code: int = 0
    log: str = ""
    seconds: float = 0.0


@dataclasses.dataclass
class _Container:
    name: str
    image: str
    state: JSON = dataclasses.field(
        default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}}
    )
    last_state: JSON = dataclasses.field(default_factory=dict)
    restarts: int = 0
    pull_failures: int = 0
    crashes: int = 0
    #: Bumped on every change of state, so that a timer set for an older state does nothing.
    generation: int = 0


@dataclasses.dataclass
class _Pod:
    uid: str
    namespace: str
    name: str
    restart_policy: str
    containers: dict[str, _Container]
    started: str


class Kubelet:
    """Pulls images, runs containers and reports Pod status for every bound Pod."""

    def __init__(self, *, time_scale: float = 1.0) -> None:
        self.time_scale = time_scale
        self.unpullable: set[str] = set()
        self.scripts: dict[str, Script] = {}
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._store: Store | None = None

    # --- reacting to the API --------------------------------------------------------

    def react(self, store: Store, change: Change) -> None:
        self._store = store
        if (change.group, change.plural) != ("", "pods"):
            return
        key = _pod_key(change.new)
        known = self._pods.get(key)
        if change.type == "DELETED":
            if known is not None and known.uid == change.new["metadata"]["uid"]:
                del self._pods[key]
            return
        if known is not None or not (change.new.get("spec") or {}).get("nodeName"):
            return
        spec = change.new["spec"]
        pod = _Pod(
            uid=change.new["metadata"]["uid"],
            namespace=key[0],
            name=key[1],
            restart_policy=spec.get("restartPolicy") or "Always",
            containers={
                c["name"]: _Container(c["name"], c.get("image", "")) for c in spec["containers"]
            },
            started=now(),
        )
        self._pods[key] = pod
        self._publish(pod)
        for container in pod.containers.values():
            self._pull(pod, container)

    # --- what tests call (in the loop, through Workloads) -------------------------------

    def exit(self, namespace: str, name: str, container: str, exit_code: int, log: str) -> None:
        pod = self._pods.get((namespace, name))
        if pod is None or container not in pod.containers:
            raise LookupError(
                f"the kubelet runs no container {container} in Pod {namespace}/{name}"
            )
        running = pod.containers[container]
        if "running" not in running.state:
            raise LookupError(f"container {container} of Pod {namespace}/{name} is not running")
        self._exit(pod, running, exit_code, log)

    def disrupt(self, namespace: str, name: str) -> None:
        """An eviction: DisruptionTarget, then every running container killed (137)."""
        pod = self._pods.get((namespace, name))
        if pod is None:
            raise LookupError(f"the kubelet runs no Pod {namespace}/{name}")
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
            "lastTransitionTime": now(),
        }
        pod.restart_policy = "Never"  # an evicted Pod is not restarted in place
        for container in pod.containers.values():
            container.generation += 1
            container.state = {"terminated": self._terminated(container, 137, "Error")}
        self._publish(pod, extra=[condition])

    # --- the kubelet's own work ---------------------------------------------------------

    def _live_store(self) -> Store:
        if self._store is None:
            raise LookupError("the kubelet has seen no Pod yet")
        return self._store

    def _later(self, seconds: float, container: _Container, action: Callable[[], None]) -> None:
        generation = container.generation

        def fire() -> None:
            if container.generation == generation:
                action()

        self._live_store().later(seconds * self.time_scale, fire)

    def _set(self, pod: _Pod, container: _Container, state: JSON) -> None:
        container.generation += 1
        container.state = state
        self._publish(pod)

    def _pull(self, pod: _Pod, container: _Container) -> None:
        if (pod.namespace, pod.name) not in self._pods:
            return
        if container.image not in self.unpullable:
            self._start(pod, container)
            return
        container.pull_failures += 1
        reference = container.image
        failed = {
            "reason": "ErrImagePull",
            "message": (
                f'failed to pull and unpack image "{reference}": failed to resolve reference '
                f'"{reference}": {reference}: not found'
            ),
        }
        self._set(pod, container, {"waiting": failed})
        backoff = min(PULL_BACKOFF * 2 ** (container.pull_failures - 1), MAX_BACKOFF)
        waiting = {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{reference}"'}
        self._later(
            SYNC_SECONDS, container, lambda: self._set(pod, container, {"waiting": waiting})
        )
        self._live_store().later(
            backoff * self.time_scale,
            lambda: (
                self._pull(pod, container)
                if self._pods.get((pod.namespace, pod.name)) is pod
                else None
            ),
        )

    def _start(self, pod: _Pod, container: _Container) -> None:
        self._set(pod, container, {"running": {"startedAt": now()}})
        script = self.scripts.get(container.image)
        if script is not None:
            self._later(
                script.seconds,
                container,
                lambda: self._exit(pod, container, script.exit_code, script.log),
            )

    def _terminated(self, container: _Container, exit_code: int, reason: str) -> JSON:
        started = (container.state.get("running") or {}).get("startedAt") or now()
        return {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": now(),
            "containerID": f"containerd://{uuid.uuid4().hex}",
        }

    def _exit(self, pod: _Pod, container: _Container, exit_code: int, log: str) -> None:
        store = self._live_store()
        key = (pod.namespace, pod.name, container.name)
        store.logs[key] = store.logs.get(key, "") + log
        terminated = self._terminated(
            container, exit_code, "Completed" if exit_code == 0 else "Error"
        )
        restart = pod.restart_policy == "Always" or (
            pod.restart_policy == "OnFailure" and exit_code != 0
        )
        if not restart:
            self._set(pod, container, {"terminated": terminated})
            return
        delay = min(PULL_BACKOFF * 2**container.crashes, MAX_BACKOFF)
        container.crashes += 1
        container.last_state = {"terminated": terminated}
        message = (
            f"back-off {delay:g}s restarting failed container={container.name}"
            f" pod={pod.name}_{pod.namespace}({pod.uid})"
        )
        self._set(pod, container, {"waiting": {"reason": "CrashLoopBackOff", "message": message}})

        def restart_it() -> None:
            container.restarts += 1
            self._start(pod, container)

        self._later(delay, container, restart_it)

    def _phase(self, pod: _Pod) -> str:
        states = list(pod.containers.values())
        if any("waiting" in c.state and not c.last_state for c in states):
            return "Pending"
        if any("running" in c.state for c in states):
            return "Running"
        ended = [c.state.get("terminated") or {} for c in states]
        if any("waiting" in c.state for c in states) or pod.restart_policy == "Always":
            return "Running"  # stopped, to be restarted
        succeeded = all(t.get("exitCode") == 0 for t in ended)
        if succeeded:
            return "Succeeded"
        return "Running" if pod.restart_policy == "OnFailure" else "Failed"

    def _publish(self, pod: _Pod, extra: Iterable[JSON] = ()) -> None:
        store = self._live_store()
        current = store.objects.get(("", "pods", pod.namespace, pod.name))
        if current is None or current["metadata"]["uid"] != pod.uid:
            return
        ready = all("running" in c.state for c in pod.containers.values())
        kept = [
            c
            for c in (current.get("status") or {}).get("conditions") or []
            if c.get("type") in ("PodScheduled", "DisruptionTarget")
        ]
        flag = "True" if ready else "False"
        conditions = [
            *kept,
            *extra,
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": flag},
            {"type": "ContainersReady", "status": flag},
        ]
        statuses = [
            {
                "name": c.name,
                "image": c.image,
                "imageID": "",
                "ready": "running" in c.state,
                "started": "running" in c.state,
                "restartCount": c.restarts,
                "state": copy.deepcopy(c.state),
                "lastState": copy.deepcopy(c.last_state),
            }
            for c in sorted(pod.containers.values(), key=lambda c: c.name)
        ]
        status = {
            "phase": self._phase(pod),
            "conditions": conditions,
            "startTime": pod.started,
            "containerStatuses": statuses,
        }
        store.set_status(PODS, pod.namespace, pod.name, status)


class Workloads:
    """The controllers a test switched on, and what the test does to the Pods they run."""

    def __init__(self, kube: KubeEmulator, kubelet: Kubelet) -> None:
        self.kube = kube
        self.kubelet = kubelet

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
    """Nodes (one untainted worker by default) and the scheduler, kubelet and Job controllers."""
    for obj in nodes if nodes is not None else [node("worker-1")]:
        kube.put_object(obj)
    kubelet = Kubelet(time_scale=time_scale)
    kube.add_controller(Scheduler())
    kube.add_controller(kubelet)
    kube.add_controller(kube_jobs.JobController(time_scale=time_scale))
    kube.add_controller(kube_jobs.JobTTLController(time_scale=time_scale))
    return Workloads(kube, kubelet)
