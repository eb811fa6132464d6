"""Which templates a hook call starts, and the key of the moment it belongs to (pure functions)."""

from __future__ import annotations

from collections.abc import Iterator
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
    if moment is catalog.Moment.MACHINE_SPEC:
        return call.update_moment
    return ""


def matches(spec: typed.Template, call: wire.HookCall) -> bool:
    """True if a template's clusterSelector and settings both match the call."""
    return next(_mismatches(spec, call), None) is None


def mismatches(spec: typed.Template, call: wire.HookCall) -> list[str]:
    """Why a template does not match the call, one sentence per selector or setting that
    fails ([] when it matches): what `workflows preview` prints."""
    return list(_mismatches(spec, call))


def _mismatches(spec: typed.Template, call: wire.HookCall) -> Iterator[str]:
    """The rules of `matches`, lazily: the hook path stops at the first."""
    selector = spec.cluster_selector
    cluster = call.cluster
    if selector.namespaces and cluster.namespace not in selector.namespaces:
        yield (
            f"clusterSelector.namespaces is {', '.join(selector.namespaces)}; "
            f"the cluster is in {cluster.namespace}"
        )
    for key, value in sorted((selector.match_labels or {}).items()):
        if cluster.labels.get(key) != value:
            found = cluster.labels.get(key)
            has = f"has {key}={found}" if found is not None else f"has no label {key}"
            yield f"clusterSelector.matchLabels wants {key}={value}; the cluster {has}"
    if selector.cluster_class and cluster.class_name != selector.cluster_class:
        has = f"is of class {cluster.class_name}" if cluster.class_name else "has no class"
        yield f"clusterSelector.clusterClass is {selector.cluster_class}; the cluster {has}"
    for key, value in sorted(spec.settings.items()):
        if call.settings.get(key) != value:
            given = call.settings.get(key)
            carries = f"carries {key}={given}" if given is not None else f"carries no {key}"
            yield f"settings wants {key}={value}; the call {carries}"


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
        **({"machine": call.machine} if call.machine is not None else {}),
    }
