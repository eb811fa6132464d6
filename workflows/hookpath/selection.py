"""Which templates a hook call starts, and the key of the moment it belongs to (pure functions)."""

from __future__ import annotations

from typing import Any

from hooksvc.contract import catalog, wire
from workflows.definitions import typed


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


def matches(spec: typed.Template, call: wire.HookCall) -> bool:
    """True if a template's clusterSelector and settings both match the call."""
    selector = spec.cluster_selector
    cluster = call.cluster
    if selector.namespaces and cluster.namespace not in selector.namespaces:
        return False
    for key, value in (selector.match_labels or {}).items():
        if cluster.labels.get(key) != value:
            return False
    if selector.cluster_class and cluster.class_name != selector.cluster_class:
        return False
    return all(call.settings.get(k) == v for k, v in spec.settings.items())


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
