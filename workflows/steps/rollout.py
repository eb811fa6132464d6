"""When a Deployment, StatefulSet or DaemonSet is rolled out, as `kubectl rollout status` says.

`status` reads one object (spec and the controller's status) the way kubectl's status
viewers do (kubernetes staging/src/k8s.io/kubectl/pkg/polymorphichelpers/
rollout_status.go): nothing counts before the controller observed the latest generation;
a Deployment whose Progressing condition says `ProgressDeadlineExceeded` has failed; a
StatefulSet with `rollingUpdate.partition` is done once `replicas - partition` pods are
updated; an `OnDelete` StatefulSet or DaemonSet is not waited for (its pods change only
when someone deletes them). Defaults are the API server's (pkg/apis/apps/v1/defaults.go):
one replica, the RollingUpdate strategy, partition 0. Pure, so `addon_install` and the
tests read it on its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from workflows import durations

KINDS = ("Deployment", "StatefulSet", "DaemonSet")
#: The Progressing condition's reason once a Deployment's progressDeadlineSeconds passed.
DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"


@dataclasses.dataclass(frozen=True)
class Rollout:
    """Where one workload's rollout stands; `message` says what it waits for."""

    done: bool
    message: str = ""
    #: Why the rollout cannot finish (the step fails), e.g. ProgressDeadlineExceeded.
    failed: str = ""
    #: Why it is not waited for (OnDelete), when it is not.
    skipped: str = ""


def _int(value: Any) -> int:
    return int(value or 0)


def status(obj: dict[str, Any]) -> Rollout:
    """The rollout of `obj` (a Deployment, StatefulSet or DaemonSet with its status)."""
    kind = obj["kind"]
    if kind == "Deployment":
        return _deployment(obj)
    if kind == "StatefulSet":
        return _stateful_set(obj)
    if kind == "DaemonSet":
        return _daemon_set(obj)
    raise ValueError(f"no rollout status for {kind}")


def _observed(obj: dict[str, Any]) -> bool:
    generation = _int((obj.get("metadata") or {}).get("generation"))
    return generation <= _int((obj.get("status") or {}).get("observedGeneration"))


def _deployment(obj: dict[str, Any]) -> Rollout:
    spec, status_ = obj.get("spec") or {}, obj.get("status") or {}
    if not _observed(obj):
        return Rollout(False, "waiting for the spec update to be observed")
    for condition in status_.get("conditions") or []:
        if condition.get("type") == "Progressing" and condition.get("reason") == DEADLINE_EXCEEDED:
            return Rollout(False, failed=DEADLINE_EXCEEDED)
    replicas = _int(spec.get("replicas", 1))
    updated = _int(status_.get("updatedReplicas"))
    if updated < replicas:
        return Rollout(False, f"{updated} out of {replicas} new replicas have been updated")
    if _int(status_.get("replicas")) > updated:
        old = _int(status_.get("replicas")) - updated
        return Rollout(False, f"{old} old replicas are pending termination")
    available = _int(status_.get("availableReplicas"))
    if available < updated:
        return Rollout(False, f"{available} of {updated} updated replicas are available")
    return Rollout(True)


def _strategy(spec: dict[str, Any], field: str) -> dict[str, Any]:
    strategy: dict[str, Any] = spec.get(field) or {}
    return strategy


def _stateful_set(obj: dict[str, Any]) -> Rollout:
    spec, status_ = obj.get("spec") or {}, obj.get("status") or {}
    strategy = _strategy(spec, "updateStrategy")
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return Rollout(True, skipped=f"updateStrategy {strategy.get('type')}")
    observed = _int(status_.get("observedGeneration"))
    if observed == 0 or not _observed(obj):
        return Rollout(False, "waiting for the spec update to be observed")
    replicas = _int(spec.get("replicas", 1))
    ready = _int(status_.get("readyReplicas"))
    if ready < replicas:
        waiting = replicas - ready
        are = "is" if waiting == 1 else "are"
        return Rollout(False, f"{durations.count(waiting, 'pod')} {are} not ready")
    rolling = strategy.get("rollingUpdate")
    if rolling is None and "type" not in strategy:
        rolling = {}  # the API server defaults an absent strategy to partition 0
    if rolling is not None:
        wanted = replicas - _int(rolling.get("partition"))
        updated = _int(status_.get("updatedReplicas"))
        if updated < wanted:
            return Rollout(False, f"{updated} out of {wanted} new pods have been updated")
        return Rollout(True)
    if status_.get("updateRevision") != status_.get("currentRevision"):
        return Rollout(False, "waiting for the rolling update to reach every pod")
    return Rollout(True)


def _daemon_set(obj: dict[str, Any]) -> Rollout:
    spec, status_ = obj.get("spec") or {}, obj.get("status") or {}
    strategy = _strategy(spec, "updateStrategy")
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return Rollout(True, skipped=f"updateStrategy {strategy.get('type')}")
    if not _observed(obj):
        return Rollout(False, "waiting for the spec update to be observed")
    desired = _int(status_.get("desiredNumberScheduled"))
    updated = _int(status_.get("updatedNumberScheduled"))
    if updated < desired:
        return Rollout(False, f"{updated} out of {desired} new pods have been updated")
    available = _int(status_.get("numberAvailable"))
    if available < desired:
        return Rollout(False, f"{available} of {desired} updated pods are available")
    return Rollout(True)
