"""`backup_pvs`: back up a workload cluster's persistent volumes, with CSI snapshots or Velero.

`backend: csi` makes a `snapshot.storage.k8s.io/v1` VolumeSnapshot per chosen PVC and is done
when every one is `readyToUse`. `backend: velero` makes one `velero.io/v1` Backup in Velero's
namespace and is done when its phase is `Completed`. Both run in the workload cluster.

Before a deletion a snapshot must outlive the cluster: a VolumeSnapshotClass whose
deletionPolicy is `Delete` removes the storage snapshot together with the VolumeSnapshot,
that is with the cluster. So on BeforeClusterDelete the csi backend needs a class named
explicitly (checked when the template is applied) whose deletionPolicy is `Retain` (checked
when the step runs); Velero, which keeps backups outside the cluster, is the recommended backend.
"""

from __future__ import annotations

from typing import Any

from workflows import errors, k8s
from workflows.steps import objects, registry

SNAPSHOT_API = "snapshot.storage.k8s.io/v1"
VELERO_API = "velero.io/v1"
DELETE_HOOK = "BeforeClusterDelete"
RETAIN_ADVICE = (
    "on BeforeClusterDelete a snapshot must outlive the cluster, which needs a "
    "VolumeSnapshotClass with deletionPolicy Retain; the velero backend is recommended"
)


def _check(params: dict[str, Any], hook: str) -> None:
    if (
        params["backend"] == "csi"
        and hook == DELETE_HOOK
        and not params.get("volumeSnapshotClassName")
    ):
        raise registry.ParamError("volumeSnapshotClassName", f"is required: {RETAIN_ADVICE}")
    velero_only = ("ttl", "snapshotVolumes", "allowPartiallyFailed", "storageLocation")
    if params["backend"] == "csi":
        for name in velero_only:
            if name in params and params[name] != PARAMS[name].default:
                raise registry.ParamError(name, "applies to backend velero only")


PARAMS = {
    "backend": registry.Param(str, default="csi", choices=("csi", "velero")),
    #: The namespaces whose PVCs (csi) or resources (velero) are backed up; none: all.
    "namespaces": registry.Param(list, default=[], check=objects.check_strings),
    #: Labels a PVC (csi) or resource (velero) must carry.
    "labelSelector": registry.Param(dict, default={}, check=objects.check_string_map),
    "volumeSnapshotClassName": registry.Param(str),
    "veleroNamespace": registry.Param(str, default="velero"),
    "storageLocation": registry.Param(str),
    "snapshotVolumes": registry.Param(bool, default=True),
    "ttl": registry.Param(str, default="720h0m0s"),
    "allowPartiallyFailed": registry.Param(bool, default=False),
    "pollSeconds": registry.Param((int, float), default=10, minimum=1),
}


@registry.step_type("backup_pvs", params=PARAMS, check=_check)
def backup_pvs(ctx: registry.StepContext) -> registry.Outcome:
    """Backs up persistent volumes with CSI snapshots or a Velero backup."""
    api = objects.workload(ctx)
    if ctx.params["backend"] == "velero":
        return _velero(ctx, api)
    return _csi(ctx, api)


# --- csi -------------------------------------------------------------------------------


def _check_class(ctx: registry.StepContext, api: k8s.ApiClient) -> None:
    name = ctx.params.get("volumeSnapshotClassName")
    if ctx.run_context.get("hook") != DELETE_HOOK:
        return
    if not name:  # a template stored before the check existed
        raise errors.PermanentError(f"backend csi needs volumeSnapshotClassName: {RETAIN_ADVICE}")
    what = f"VolumeSnapshotClass {name}"
    found = objects.get(
        api, objects.path(SNAPSHOT_API, "volumesnapshotclasses", name=name), what=what
    )
    if found is None:
        raise errors.PermanentError(f"{what} not found")
    policy = found.get("deletionPolicy")
    if policy != "Retain":
        raise errors.PermanentError(f"{what} has deletionPolicy {policy}: {RETAIN_ADVICE}")


def _claims(ctx: registry.StepContext, api: k8s.ApiClient) -> list[objects.JSON]:
    selector = ctx.params.get("labelSelector") or None
    namespaces = ctx.params.get("namespaces") or []
    if not namespaces:
        collection = objects.path("v1", "persistentvolumeclaims")
        return objects.items(api, collection, what="PersistentVolumeClaims", selector=selector)
    found: list[objects.JSON] = []
    for ns in sorted(set(namespaces)):
        collection = objects.path("v1", "persistentvolumeclaims", ns)
        found += objects.items(
            api, collection, what=f"PersistentVolumeClaims in {ns}", selector=selector
        )
    return found


def _start_csi(ctx: registry.StepContext, api: k8s.ApiClient) -> list[dict[str, str]]:
    _check_class(ctx, api)
    volumes = []
    for claim in _claims(ctx, api):
        ns, pvc = claim["metadata"]["namespace"], claim["metadata"]["name"]
        # A PVC's name is unique in its namespace, so the snapshot's name is too.
        name = ctx.object_name(pvc)
        spec: dict[str, Any] = {"source": {"persistentVolumeClaimName": pvc}}
        if ctx.params.get("volumeSnapshotClassName"):
            spec["volumeSnapshotClassName"] = ctx.params["volumeSnapshotClassName"]
        body = {
            "apiVersion": SNAPSHOT_API,
            "kind": "VolumeSnapshot",
            "metadata": {"name": name, "namespace": ns, "labels": objects.labels(ctx)},
            "spec": spec,
        }
        collection = objects.path(SNAPSHOT_API, "volumesnapshots", ns)
        objects.ensure(api, collection, body, what=f"VolumeSnapshot {ns}/{name}")
        volumes.append({"namespace": ns, "persistentVolumeClaim": pvc, "volumeSnapshot": name})
    return volumes


def _csi(ctx: registry.StepContext, api: k8s.ApiClient) -> registry.Outcome:
    if "volumes" not in ctx.memo:
        ctx.memo["volumes"] = _start_csi(ctx, api)
    results = []
    failed = None
    for volume in ctx.memo["volumes"]:
        ns, name = volume["namespace"], volume["volumeSnapshot"]
        what = f"VolumeSnapshot {ns}/{name}"
        found = objects.get(api, objects.path(SNAPSHOT_API, "volumesnapshots", ns, name), what=what)
        status = (found or {}).get("status") or {}
        result = {**volume, "readyToUse": bool(status.get("readyToUse"))}
        if status.get("boundVolumeSnapshotContentName"):
            result["volumeSnapshotContent"] = status["boundVolumeSnapshotContentName"]
        if status.get("restoreSize"):
            result["restoreSize"] = status["restoreSize"]
        if found is None:
            result["result"], failed = "missing", failed or f"{what} was deleted"
        elif status.get("error"):
            result["result"], failed = "failed", failed or f"{what} failed (see its status.error)"
        else:
            result["result"] = "ready" if result["readyToUse"] else "pending"
        results.append(result)
    output = {"backend": "csi", "volumes": results}
    if failed:
        raise errors.PermanentError(failed, output=output)
    pending = sum(1 for r in results if r["result"] == "pending")
    if pending:
        message = f"{len(results) - pending} of {len(results)} volume snapshots ready"
        return registry.Poll(after=ctx.params["pollSeconds"], message=message, output=output)
    return registry.Done(output)


# --- velero ----------------------------------------------------------------------------


def _velero(ctx: registry.StepContext, api: k8s.ApiClient) -> registry.Outcome:
    ns, name = ctx.params["veleroNamespace"], ctx.object_name()
    what = f"Backup {ns}/{name}"
    if not ctx.memo.get("created"):
        spec: dict[str, Any] = {
            "includedNamespaces": sorted(set(ctx.params.get("namespaces") or [])) or ["*"],
            "snapshotVolumes": ctx.params["snapshotVolumes"],
            "ttl": ctx.params["ttl"],
        }
        if ctx.params.get("labelSelector"):
            spec["labelSelector"] = {"matchLabels": dict(ctx.params["labelSelector"])}
        if ctx.params.get("storageLocation"):
            spec["storageLocation"] = ctx.params["storageLocation"]
        body = {
            "apiVersion": VELERO_API,
            "kind": "Backup",
            "metadata": {"name": name, "namespace": ns, "labels": objects.labels(ctx)},
            "spec": spec,
        }
        objects.ensure(api, objects.path(VELERO_API, "backups", ns), body, what=what)
        ctx.memo["created"] = True
    found = objects.get(api, objects.path(VELERO_API, "backups", ns, name), what=what)
    if found is None:
        raise errors.PermanentError(f"{what} was deleted")
    status = found.get("status") or {}
    phase = status.get("phase") or "New"
    backup = {"namespace": ns, "name": name, "phase": phase}
    for key in ("errors", "warnings"):
        if key in status:
            backup[key] = status[key]
    output = {"backend": "velero", "backup": backup}
    if phase == "Completed" or (phase == "PartiallyFailed" and ctx.params["allowPartiallyFailed"]):
        return registry.Done(output)
    if phase in ("Failed", "PartiallyFailed", "FailedValidation"):
        raise errors.PermanentError(f"{what} ended in phase {phase}", output=output)
    return registry.Poll(
        after=ctx.params["pollSeconds"], message=f"{what} is {phase}", output=output
    )
