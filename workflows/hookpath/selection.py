"""Which templates a hook call starts, and the key of the moment it belongs to (pure functions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hooksvc.contract import catalog, wire


def moment_key(call: wire.HookCall) -> str:
    """The attributes that make one logical moment: the same key, the same run."""
    moment = call.hook.moment
    if moment is catalog.Moment.TO_VERSION:
        return call.to_version
    if moment is catalog.Moment.FROM_TO:
        return f"{call.from_version}->{call.to_version}"
    if moment is catalog.Moment.VERSION:
        return call.version
    return ""


def matches(spec: Mapping[str, Any], call: wire.HookCall) -> bool:
    """True if a template's clusterSelector and settings both match the call."""
    selector: Mapping[str, Any] = spec.get("clusterSelector") or {}
    cluster = call.cluster
    namespaces = selector.get("namespaces")
    if namespaces and cluster.namespace not in namespaces:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if cluster.labels.get(key) != value:
            return False
    cluster_class = selector.get("clusterClass")
    if cluster_class and cluster.class_name != cluster_class:
        return False
    return all(call.settings.get(k) == v for k, v in (spec.get("settings") or {}).items())


def run_context(call: wire.HookCall) -> dict[str, Any]:
    """What the run's steps see of the call."""
    cluster = call.cluster
    return {
        "hook": call.hook.name,
        "cluster": {
            "name": cluster.name,
            "namespace": cluster.namespace,
            "uid": cluster.uid,
            "labels": cluster.labels,
            "annotations": cluster.annotations,
            "topologyVersion": cluster.topology_version,
            "className": cluster.class_name,
            "classNamespace": cluster.class_namespace,
        },
        "fromKubernetesVersion": call.from_version,
        "toKubernetesVersion": call.to_version,
        "kubernetesVersion": call.version,
        "controlPlaneUpgrades": list(call.control_plane_upgrades),
        "workersUpgrades": list(call.workers_upgrades),
        "settings": call.settings,
    }
