"""kube-controller-manager's workload controllers in the emulator, as far as rollouts go.

`AppsControllers` (switched on by a test: `kube.add_controller(AppsControllers(...))`)
writes the status of Deployments, StatefulSets and DaemonSets the way the deployment,
statefulset and daemonset controllers do (kubernetes pkg/controller/deployment/sync.go and
progress.go, pkg/controller/statefulset/stateful_set_control.go,
pkg/controller/daemon/daemon_controller.go): on a new generation, at once
`observedGeneration` and pods not yet available; `ready_after` seconds later every pod
available. A StatefulSet update with `rollingUpdate.partition` replaces only the pods
from that ordinal up; an `OnDelete` StatefulSet or DaemonSet replaces none (its pods change
only when deleted). A Deployment named in `stuck` never gets an available new pod (an
image that cannot be pulled, say): `deadline_seconds` later its Progressing condition turns
False with reason ProgressDeadlineExceeded, as progress.go does once progressDeadlineSeconds
pass (600 s by default: too long for a test).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable
from typing import Any

from tests.support.kube_semantics import JSON
from tests.support.kube_store import Change, Store

APPS = "apps"
RESOURCES = {"deployments": "Deployment", "statefulsets": "StatefulSet", "daemonsets": "DaemonSet"}


def _revision(name: str, spec: JSON) -> str:
    template = json.dumps(spec.get("template") or {}, sort_keys=True)
    return f"{name}-{hashlib.sha256(template.encode()).hexdigest()[:10]}"


def _condition(kind: str, status: str, reason: str, message: str) -> JSON:
    return {"type": kind, "status": status, "reason": reason, "message": message}


class AppsControllers:
    """The deployment, statefulset and daemonset controllers' status writes."""

    def __init__(
        self,
        *,
        ready_after: float = 0.0,
        nodes: int = 2,
        stuck: Iterable[str] = (),
        deadline_seconds: float = 0.3,
    ) -> None:
        self.ready_after = ready_after
        #: How many nodes a DaemonSet runs on.
        self.nodes = nodes
        #: "namespace/name" of Deployments whose new pods never become available.
        self.stuck = set(stuck)
        self.deadline_seconds = deadline_seconds

    def react(self, store: Store, change: Change) -> None:
        if change.group != APPS or change.plural not in RESOURCES or change.type == "DELETED":
            return
        meta = change.new.get("metadata") or {}
        key = (APPS, change.plural, meta.get("namespace", ""), meta.get("name", ""))
        obj = store.objects.get(key)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return
        generation = int(obj["metadata"].get("generation", 1))
        observed = int((obj.get("status") or {}).get("observedGeneration") or 0)
        if observed == generation:
            return
        start = {
            "deployments": self._deployment,
            "statefulsets": self._stateful_set,
            "daemonsets": self._daemon_set,
        }[change.plural]
        start(store, key, obj, updating=observed > 0)

    def _write(self, store: Store, key: tuple[str, str, str, str], status: JSON) -> None:
        resource = (APPS, "v1", key[1])
        store.set_status(resource, key[2], key[3], status)

    def _later(
        self,
        store: Store,
        key: tuple[str, str, str, str],
        generation: int,
        seconds: float,
        status: JSON,
    ) -> None:
        def finish() -> None:
            current = store.objects.get(key)
            # A newer generation started its own rollout: this one is moot.
            if current is not None and current["metadata"].get("generation") == generation:
                self._write(store, key, status)

        store.later(seconds, finish)

    def _deployment(self, store: Store, key: Any, obj: JSON, *, updating: bool) -> None:
        spec, generation = obj.get("spec") or {}, obj["metadata"]["generation"]
        replicas = int(spec.get("replicas", 1))
        replica_set = _revision(key[3], spec)
        self._write(
            store,
            key,
            {
                "observedGeneration": generation,
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": 0,
                "availableReplicas": 0,
                "unavailableReplicas": replicas,
                "conditions": [
                    _condition(
                        "Available", "False", "MinimumReplicasUnavailable",
                        "Deployment does not have minimum availability.",
                    ),
                    _condition(
                        "Progressing", "True", "ReplicaSetUpdated",
                        f'ReplicaSet "{replica_set}" is progressing.',
                    ),
                ],
            },
        )  # fmt: skip
        if f"{key[2]}/{key[3]}" in self.stuck:
            exceeded = _condition(
                "Progressing", "False", "ProgressDeadlineExceeded",
                f'ReplicaSet "{replica_set}" has timed out progressing.',
            )  # fmt: skip
            unavailable = _condition(
                "Available", "False", "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
            )  # fmt: skip
            conditions = {"conditions": [unavailable, exceeded]}
            self._later(store, key, generation, self.deadline_seconds, conditions)
            return
        self._later(
            store,
            key,
            generation,
            self.ready_after,
            {
                "readyReplicas": replicas,
                "availableReplicas": replicas,
                "unavailableReplicas": None,
                "conditions": [
                    _condition(
                        "Available", "True", "MinimumReplicasAvailable",
                        "Deployment has minimum availability.",
                    ),
                    _condition(
                        "Progressing", "True", "NewReplicaSetAvailable",
                        f'ReplicaSet "{replica_set}" has successfully progressed.',
                    ),
                ],
            },
        )  # fmt: skip

    def _stateful_set(self, store: Store, key: Any, obj: JSON, *, updating: bool) -> None:
        spec, generation = obj.get("spec") or {}, obj["metadata"]["generation"]
        replicas = int(spec.get("replicas", 1))
        strategy = spec.get("updateStrategy") or {}
        revision = _revision(key[3], spec)
        status = obj.get("status") or {}
        current = status.get("currentRevision") if updating else revision
        if strategy.get("type", "RollingUpdate") == "OnDelete":
            updated = 0 if updating else replicas
        else:
            partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
            updated = replicas - partition if updating else replicas
        if updated == replicas:
            current = revision
        self._write(
            store,
            key,
            {
                "observedGeneration": generation,
                "replicas": replicas,
                "readyReplicas": replicas - 1 if updating and updated else 0,
                "availableReplicas": replicas - 1 if updating and updated else 0,
                "updatedReplicas": 0,
                "currentReplicas": replicas if updating else 0,
                "updateRevision": revision,
                "currentRevision": status.get("currentRevision") or revision,
            },
        )
        self._later(
            store,
            key,
            generation,
            self.ready_after,
            {
                "readyReplicas": replicas,
                "availableReplicas": replicas,
                "updatedReplicas": updated,
                "currentReplicas": replicas - updated if current != revision else replicas,
                "currentRevision": current,
            },
        )

    def _daemon_set(self, store: Store, key: Any, obj: JSON, *, updating: bool) -> None:
        spec, generation = obj.get("spec") or {}, obj["metadata"]["generation"]
        on_delete = (spec.get("updateStrategy") or {}).get("type") == "OnDelete"
        updated = 0 if updating and on_delete else self.nodes
        self._write(
            store,
            key,
            {
                "observedGeneration": generation,
                "desiredNumberScheduled": self.nodes,
                "numberMisscheduled": 0,
                "currentNumberScheduled": self.nodes if updating else 0,
                "updatedNumberScheduled": 0,
                "numberReady": self.nodes if updating and on_delete else 0,
                "numberAvailable": self.nodes if updating and on_delete else 0,
            },
        )
        self._later(
            store,
            key,
            generation,
            self.ready_after,
            {
                "currentNumberScheduled": self.nodes,
                "updatedNumberScheduled": updated,
                "numberReady": self.nodes,
                "numberAvailable": self.nodes,
            },
        )


class Operator:
    """A custom resource's controller, running as a Deployment, and its finalizer.

    Operators put a finalizer on the objects they manage and remove it once they have
    cleaned up after a deleted one (the finalizers page of the Kubernetes documentation,
    concepts/overview/working-with-objects/finalizers). They can only do so while their
    Pods run: here, while the Deployment `deployment` ("namespace/name") exists and is not
    being deleted. Its objects deleted after it are stuck, as in a real cluster.
    """

    def __init__(
        self, group: str, plural: str, finalizer: str, deployment: str, delay: float = 0.0
    ) -> None:
        self.group, self.plural, self.finalizer = group, plural, finalizer
        namespace, name = deployment.split("/", 1)
        self.deployment = (namespace, name)
        self.delay = delay

    def running(self, store: Store) -> bool:
        found = store.objects.get((APPS, "deployments", *self.deployment))
        return found is not None and not found["metadata"].get("deletionTimestamp")

    def react(self, store: Store, change: Change) -> None:
        if (change.group, change.plural) == (APPS, "deployments"):
            meta = change.new.get("metadata") or {}
            if (meta.get("namespace"), meta.get("name")) == self.deployment:
                for key in [k for k in store.objects if k[:2] == (self.group, self.plural)]:
                    self._sync(store, key)  # started (again): catches up with its objects
        elif (change.group, change.plural) == (self.group, self.plural):
            meta = change.new.get("metadata") or {}
            self._sync(store, (self.group, self.plural, meta.get("namespace") or "", meta["name"]))

    def _sync(self, store: Store, key: tuple[str, str, str, str]) -> None:
        obj = store.objects.get(key)
        if obj is None or not self.running(store):
            return
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        res = store.resource_for(self.group, self.plural)
        if not meta.get("deletionTimestamp"):
            if self.finalizer not in finalizers:
                updated = copy.deepcopy(obj)
                updated["metadata"]["finalizers"] = [*finalizers, self.finalizer]
                store.write(res, updated)
            return
        if self.finalizer in finalizers:

            def release() -> None:
                current = store.objects.get(key)
                if current is None or not self.running(store):
                    return
                updated = copy.deepcopy(current)
                kept = [
                    f for f in updated["metadata"].get("finalizers") or [] if f != self.finalizer
                ]
                updated["metadata"]["finalizers"] = kept
                store.write(res, updated)

            store.later(self.delay, release)
