"""The emulator's kubelet: how a bound Pod's containers start, run, end and stop.

Switched on by `kube_workloads.start`. For each Pod kube-scheduler bound, it walks each
container through the steps of the kubelet's `startContainer` (kubernetes v1.33,
pkg/kubelet/kuberuntime/kuberuntime_container.go) and reports the status the kubelet
reports (pkg/kubelet/kubelet_pods.go, `convertToAPIContainerStatuses`: a container that
failed to start and will be tried again is `waiting` with the failure's reason):

1. Pull the image (pkg/kubelet/images/image_manager.go): an image a test marks unpullable
   waits in `ErrImagePull` (the runtime's error), then `ImagePullBackOff` (`Back-off
   pulling image "..."`) until the next pull, the backoff doubling from 10 s to 300 s.
2. Make the container's config (`generateContainerConfig`, `makeEnvironmentVariables`): an
   `env[].valueFrom` or `envFrom` naming a Secret or ConfigMap that does not exist (or a key
   it lacks), unless `optional`, is `CreateContainerConfigError` with the error as message
   (`secret "db" not found`, `couldn't find key password in Secret ns/db`).
3. The runtime creates the container: one a test makes fail (`RuntimeFailure("create")`)
   is `CreateContainerError` with the runtime's message.
4. The runtime starts it: one a test makes fail (`RuntimeFailure("start")`) ends as
   containerd reports it (containerd internal/cri/server/helpers.go: reason `StartError`,
   exit code 128); a container that will be restarted shows `RunContainerError` first,
   then `CrashLoopBackOff`; one of a `Never` Pod stays terminated, which fails the Pod.

Steps 2 and 3 are tried again at each Pod sync (the pod workers' 10 s backoff,
pkg/kubelet/pod_workers.go), so a Secret created meanwhile lets the container start. A
started container runs until the test ends it (`Workloads.exit`) or its image's `Script`
does; it is restarted as `restartPolicy` says, waiting in `CrashLoopBackOff` in between.
The phase follows the pod lifecycle page: Pending while a container waits to start,
Running, then Succeeded or Failed once every container of a `Never` (or, on success,
`OnFailure`) Pod ended. Container statuses are sorted by name, as the kubelet sorts them.

A Pod deleted gracefully (`kube_lifecycle.delete`) is stopped: each running container gets
SIGTERM and ends when its `Script.stop_seconds` say, or is killed (137) when the grace
period ends; then, as the status manager's `TerminatePod` does
(pkg/kubelet/status/status_manager.go), a container that never ran is terminated with
reason `ContainerStatusUnknown` (137), the Pod turns `Failed` unless it had ended, and the
kubelet deletes it with grace 0. `disrupt` plays an eviction: the `DisruptionTarget`
condition and containers killed with exit code 137.

A Node's kubelet reports its own version (`status.nodeInfo.kubeletVersion`, the build's
gitVersion: kubernetes 8340f5a9 pkg/kubelet/nodestatus/setters.go `VersionInfo`) and
`Ready` (`ReadyCondition`, reason `KubeletReady`) once it (re)starts. A container whose
image's `Script.kubelet_version` is set installs that kubelet on its Node: when it exits 0,
the Node's kubelet restarts and reports the new version (what an in-place update's Job
does to a Node).

Kubernetes' durations are multiplied by `time_scale`, so that a test sees a 10 s backoff in
milliseconds. Everything here runs in the emulator's loop; `kube_workloads.Workloads` is
the thread-safe face tests hold.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from tests.support.kube_semantics import JSON
from tests.support.kube_store import Change, Store

PODS = ("", "v1", "pods")
NODES = ("", "v1", "nodes")
#: The kubelet's image pull backoff: 10 s doubling up to 300 s (MaxContainerBackOff).
PULL_BACKOFF, MAX_BACKOFF = 10.0, 300.0
#: How long after a failed pull the kubelet's next sync shows ImagePullBackOff.
SYNC_SECONDS = 1.0
#: pod_workers.go: a sync that failed (a config or create error) is tried again after 10 s.
RETRY_SECONDS = 10.0
#: containerd's exit code and reason for a container that could not be started.
START_ERROR_CODE, START_ERROR = 128, "StartError"
#: SIGKILL's and SIGTERM's exit codes.
KILLED, TERMINATED = 137, 143
_NEVER_RAN = "The container could not be located when the pod was terminated"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class Script:
    """What a container of an image does once it runs: prints `log`, exits after `seconds`;
    on SIGTERM it exits (143) after `stop_seconds`, or never (None: it is killed when the
    grace period ends)."""

    exit_code: int = 0
    log: str = ""
    seconds: float = 0.0
    stop_seconds: float | None = None
    #: Exiting 0, the container has installed this kubelet version on its Node ("": none).
    kubelet_version: str = ""


@dataclasses.dataclass(frozen=True)
class RuntimeFailure:
    """The container runtime fails to `create` or to `start` containers of an image."""

    stage: str
    message: str


@dataclasses.dataclass
class _Container:
    name: str
    image: str
    spec: JSON
    state: JSON = dataclasses.field(
        default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}}
    )
    last_state: JSON = dataclasses.field(default_factory=dict)
    container_id: str = ""
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
    node: str = ""
    stopping: bool = False


def _restarts(pod: _Pod, exit_code: int) -> bool:
    return not pod.stopping and (
        pod.restart_policy == "Always" or (pod.restart_policy == "OnFailure" and exit_code != 0)
    )


def report_node(store: Store, node: str, version: str, ready: str = "True") -> None:
    """What a Node's kubelet reports of itself once it runs: its version and Ready."""
    if store.objects.get(("", "nodes", "", node)) is None:
        return
    reason = "KubeletReady" if ready == "True" else "KubeletNotReady"
    status = {
        "nodeInfo": {"kubeletVersion": version},
        "conditions": [
            {"type": "Ready", "status": ready, "reason": reason, "lastHeartbeatTime": now()}
        ],
    }
    store.set_status(NODES, "", node, status)


class Kubelet:
    """Pulls images, runs containers and reports Pod status for every bound Pod."""

    def __init__(self, *, time_scale: float = 1.0) -> None:
        self.time_scale = time_scale
        self.unpullable: set[str] = set()
        self.scripts: dict[str, Script] = {}
        self.runtime_failures: dict[str, RuntimeFailure] = {}
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._store: Store | None = None

    # --- reacting to the API --------------------------------------------------------

    def react(self, store: Store, change: Change) -> None:
        self._store = store
        if (change.group, change.plural) != ("", "pods"):
            return
        meta = change.new["metadata"]
        key = (meta["namespace"], meta["name"])
        known = self._pods.get(key)
        if change.type == "DELETED":
            if known is not None and known.uid == meta["uid"]:
                del self._pods[key]
            return
        if known is not None:
            if meta.get("deletionTimestamp") and not known.stopping:
                self._stop(known, float(meta.get("deletionGracePeriodSeconds") or 0))
            return
        spec = change.new.get("spec") or {}
        if not spec.get("nodeName") or meta.get("deletionTimestamp"):
            return
        pod = _Pod(
            uid=meta["uid"],
            namespace=key[0],
            name=key[1],
            restart_policy=spec.get("restartPolicy") or "Always",
            containers={
                c["name"]: _Container(c["name"], c.get("image", ""), c) for c in spec["containers"]
            },
            started=now(),
            node=spec["nodeName"],
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
        pod.stopping = True  # nor pulled or started again
        for container in pod.containers.values():
            container.generation += 1
            container.state = {"terminated": self._terminated(container, KILLED, "Error")}
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

    def _alive(self, pod: _Pod) -> bool:
        return self._pods.get((pod.namespace, pod.name)) is pod and not pod.stopping

    def _pull(self, pod: _Pod, container: _Container) -> None:
        if not self._alive(pod):
            return
        if container.image not in self.unpullable:
            self._create(pod, container)
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
        self._live_store().later(backoff * self.time_scale, lambda: self._pull(pod, container))

    def _config_error(self, pod: _Pod, container: _Container) -> str:
        """makeEnvironmentVariables' error for a missing Secret or ConfigMap (or key), or ""."""
        store, ns = self._live_store(), pod.namespace
        refs: list[tuple[str, str, str | None, bool]] = []
        for env in container.spec.get("env") or []:
            source = env.get("valueFrom") or {}
            for field, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                if ref := source.get(field):
                    key, optional = ref.get("key", ""), ref.get("optional")
                    refs.append((kind, ref.get("name", ""), key, optional))
        for env_from in container.spec.get("envFrom") or []:
            for field, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                if ref := env_from.get(field):
                    refs.append((kind, ref.get("name", ""), None, ref.get("optional")))
        for kind, name, key, optional in refs:
            plural = "secrets" if kind == "Secret" else "configmaps"
            found = store.objects.get(("", plural, ns, name))
            if found is None:
                if not optional:
                    return f'{kind.lower()} "{name}" not found'
                continue
            data = {**(found.get("data") or {}), **(found.get("stringData") or {})}
            if key is not None and key not in data and not optional:
                return f"couldn't find key {key} in {kind} {ns}/{name}"
        return ""

    def _retry_later(self, pod: _Pod, container: _Container, reason: str, message: str) -> None:
        """A start that failed before the container existed: waiting, tried again next sync."""
        self._set(pod, container, {"waiting": {"reason": reason, "message": message}})
        self._later(RETRY_SECONDS, container, lambda: self._create(pod, container))

    def _create(self, pod: _Pod, container: _Container) -> None:
        if not self._alive(pod):
            return
        if error := self._config_error(pod, container):
            self._retry_later(pod, container, "CreateContainerConfigError", error)
            return
        failure = self.runtime_failures.get(container.image)
        if failure is not None and failure.stage == "create":
            self._retry_later(pod, container, "CreateContainerError", failure.message)
            return
        container.container_id = f"containerd://{uuid.uuid4().hex}"
        if failure is not None and failure.stage == "start":
            self._start_failed(pod, container, failure.message)
            return
        self._set(pod, container, {"running": {"startedAt": now()}})
        script = self.scripts.get(container.image)
        if script is not None:
            self._later(script.seconds, container, lambda: self._run_out(pod, container, script))

    def _run_out(self, pod: _Pod, container: _Container, script: Script) -> None:
        self._exit(pod, container, script.exit_code, script.log)
        if script.kubelet_version and script.exit_code == 0:
            self._live_store().later(
                SYNC_SECONDS * self.time_scale,
                lambda: report_node(self._live_store(), pod.node, script.kubelet_version),
            )

    def _start_failed(self, pod: _Pod, container: _Container, message: str) -> None:
        ended = {
            "exitCode": START_ERROR_CODE,
            "reason": START_ERROR,
            "message": message,
            "startedAt": "1970-01-01T00:00:00Z",
            "finishedAt": now(),
            "containerID": container.container_id,
        }
        if not _restarts(pod, START_ERROR_CODE):
            self._set(pod, container, {"terminated": ended})
            return
        container.last_state = {"terminated": ended}
        self._set(pod, container, {"waiting": {"reason": "RunContainerError", "message": message}})
        self._later(SYNC_SECONDS, container, lambda: self._back_off(pod, container))

    def _terminated(self, container: _Container, exit_code: int, reason: str) -> JSON:
        started = (container.state.get("running") or {}).get("startedAt") or now()
        return {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": now(),
            "containerID": container.container_id,
        }

    def _exit(self, pod: _Pod, container: _Container, exit_code: int, log: str) -> None:
        store = self._live_store()
        key = (pod.namespace, pod.name, container.name)
        store.logs[key] = store.logs.get(key, "") + log
        terminated = self._terminated(
            container, exit_code, "Completed" if exit_code == 0 else "Error"
        )
        if not _restarts(pod, exit_code):
            self._set(pod, container, {"terminated": terminated})
            if pod.stopping:
                self._finish_stop(pod)
            return
        container.last_state = {"terminated": terminated}
        self._back_off(pod, container)

    def _back_off(self, pod: _Pod, container: _Container) -> None:
        """CrashLoopBackOff until the restart backoff (10 s doubling to 300 s) has passed."""
        delay = min(PULL_BACKOFF * 2**container.crashes, MAX_BACKOFF)
        container.crashes += 1
        message = (
            f"back-off {delay:g}s restarting failed container={container.name}"
            f" pod={pod.name}_{pod.namespace}({pod.uid})"
        )
        self._set(pod, container, {"waiting": {"reason": "CrashLoopBackOff", "message": message}})

        def restart_it() -> None:
            container.restarts += 1
            self._create(pod, container)

        self._later(delay, container, restart_it)

    # --- a Pod deleted gracefully -------------------------------------------------------

    def _stop(self, pod: _Pod, grace: float) -> None:
        """SIGTERM to what runs; SIGKILL when the grace period ends; nothing more starts."""
        pod.stopping = True
        running = [c for c in pod.containers.values() if "running" in c.state]
        for container in pod.containers.values():
            container.generation += 1  # no pull, restart or script timer fires any more
        for container in running:
            script = self.scripts.get(container.image)
            stop = script.stop_seconds if script is not None else None
            if stop is not None and stop < grace:
                code, after = TERMINATED, stop
            else:
                code, after = KILLED, grace
            self._later(after, container, self._exiter(pod, container, code))
        if not running:
            self._finish_stop(pod)

    def _exiter(self, pod: _Pod, container: _Container, code: int) -> Callable[[], None]:
        return lambda: self._exit(pod, container, code, "")

    def _finish_stop(self, pod: _Pod) -> None:
        """Once nothing runs: TerminatePod's statuses and phase, then delete with grace 0."""
        if any("running" in c.state for c in pod.containers.values()):
            return
        for container in pod.containers.values():
            if "terminated" not in container.state:
                container.generation += 1
                unknown = {"exitCode": KILLED, "reason": "ContainerStatusUnknown"}
                container.state = {"terminated": {**unknown, "message": _NEVER_RAN}}
        self._publish(pod)
        store = self._live_store()
        current = store.objects.get(("", "pods", pod.namespace, pod.name))
        if current is None or current["metadata"]["uid"] != pod.uid:
            return
        final = copy.deepcopy(current)
        final["metadata"]["deletionGracePeriodSeconds"] = 0
        store.write(store.served(*PODS), final)

    def _phase(self, pod: _Pod) -> str:
        states = list(pod.containers.values())
        if any("waiting" in c.state and not c.last_state for c in states):
            return "Pending"
        if any("running" in c.state for c in states):
            return "Running"
        ended = [c.state.get("terminated") or {} for c in states]
        if not pod.stopping and (
            any("waiting" in c.state for c in states) or pod.restart_policy == "Always"
        ):
            return "Running"  # stopped, to be restarted
        if all(t.get("exitCode") == 0 for t in ended):
            return "Succeeded"
        if pod.restart_policy == "OnFailure" and not pod.stopping:
            return "Running"
        return "Failed"

    def _publish(self, pod: _Pod, extra: Iterable[JSON] = ()) -> None:
        store = self._live_store()
        current = store.objects.get(("", "pods", pod.namespace, pod.name))
        if current is None or current["metadata"]["uid"] != pod.uid:
            return
        ready = not pod.stopping and all("running" in c.state for c in pod.containers.values())
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
        statuses: list[dict[str, Any]] = [
            {
                "name": c.name,
                "image": c.image,
                "imageID": "",
                "ready": ready and "running" in c.state,
                "started": "running" in c.state,
                "restartCount": c.restarts,
                "state": copy.deepcopy(c.state),
                "lastState": copy.deepcopy(c.last_state),
                **({"containerID": c.container_id} if c.container_id else {}),
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
