"""The csi backend of `backup_pvs`: one VolumeSnapshot per Bound CSI volume, and its record.

Follows kubernetes-csi/external-snapshotter master at afb2f0d8 (2026-08-21, after v8.6.0):
client/apis/volumesnapshot/v1/types.go, pkg/common-controller/snapshot_controller.go,
pkg/sidecar-controller/snapshot_controller.go:

- Only a PVC that is Bound to a PersistentVolume whose volume is CSI can be snapshotted
  (`getVolumeFromVolumeSnapshot`, `pvDriverFromSnapshot`); the others are skipped and
  listed with the reason.
- A VolumeSnapshotClass belongs to one CSI driver, so the class is chosen per volume:
  `volumeSnapshotClasses[driver]`, else `volumeSnapshotClassName` when it is that driver's,
  else the driver's default class (annotation `snapshot.storage.kubernetes.io/
  is-default-class: "true"`, exactly one, as `SetDefaultSnapshotClass` requires). The step
  names it on each VolumeSnapshot, so the snapshot controller does not choose another.
- `status.error` is not final: the sidecar retries CreateSnapshot, whatever the error
  (createSnapshot requeues on every error; isCSIFinalError only decides whether a snapshot
  may be left behind), and the error goes when readyToUse turns true. The step keeps
  waiting, with the error in its message and output, until its timeout.
- A snapshot with `creationTime` has been cut; a driver that uploads it reports it not
  ready to use until the upload ends. The sidecar keeps the error of a failed attempt
  before the cut until then (updateSnapshotContentStatus clears it only with readyToUse),
  so an error no later than the cut is not reported as the reason the step waits.
- Each ready snapshot is recorded with its VolumeSnapshotContent's `snapshotHandle`,
  driver, restore size, class and deletionPolicy: what a pre-provisioned
  VolumeSnapshotContent needs to import the snapshot into another cluster.
"""

from __future__ import annotations

import datetime
from typing import Any

from workflows import errors
from workflows.kube import k8s
from workflows.steps import namespace_patterns, objects, registry

SNAPSHOT_API = "snapshot.storage.k8s.io/v1"
DEFAULT_CLASS = "snapshot.storage.kubernetes.io/is-default-class"
DELETE_HOOK = "BeforeClusterDelete"
RETAIN_ADVICE = (
    "on BeforeClusterDelete a snapshot must outlive the cluster, which needs a "
    "VolumeSnapshotClass with deletionPolicy Retain; the velero backend is recommended"
)
JSON = dict[str, Any]


def _claims(ctx: registry.StepContext, api: k8s.ApiClient) -> list[JSON]:
    """The PVCs of the chosen namespaces: names, or patterns as Velero reads them."""
    selector = ctx.params.get("labelSelector") or None
    namespaces = ctx.params.get("namespaces") or []
    names = namespace_patterns.literal(namespaces)
    if names is None:
        collection = objects.path("v1", "persistentvolumeclaims")
        found = objects.items(api, collection, what="PersistentVolumeClaims", selector=selector)
        return [
            claim
            for claim in found
            if namespace_patterns.selects(namespaces, [], claim["metadata"]["namespace"])
        ]
    found = []
    for ns in names:
        collection = objects.path("v1", "persistentvolumeclaims", ns)
        found += objects.items(
            api, collection, what=f"PersistentVolumeClaims in {ns}", selector=selector
        )
    return found


def _driver(api: k8s.ApiClient, claim: JSON) -> tuple[str, str]:
    """(the CSI driver of the claim's volume, "") or ("", why it cannot be snapshotted)."""
    phase = (claim.get("status") or {}).get("phase") or "Pending"
    volume_name = (claim.get("spec") or {}).get("volumeName")
    if phase != "Bound" or not volume_name:
        return "", f"not bound (phase {phase})"
    path = objects.path("v1", "persistentvolumes", name=volume_name)
    volume = objects.get(api, path, what=f"PersistentVolume {volume_name}")
    if volume is None:
        return "", f"PersistentVolume {volume_name} not found"
    csi = (volume.get("spec") or {}).get("csi")
    if not csi:
        return "", f"PersistentVolume {volume_name} is not a CSI volume"
    return str(csi.get("driver", "")), ""


def _class_for(ctx: registry.StepContext, classes: list[JSON], driver: str) -> JSON:
    by_name = {c["metadata"]["name"]: c for c in classes}
    wanted = (ctx.params.get("volumeSnapshotClasses") or {}).get(driver)
    if wanted:
        found = by_name.get(wanted)
        if found is None:
            raise errors.PermanentError(f"VolumeSnapshotClass {wanted} not found")
        if found.get("driver") != driver:
            raise errors.PermanentError(
                f"VolumeSnapshotClass {wanted} is for driver {found.get('driver')}, not {driver}"
            )
        return found
    named = by_name.get(ctx.params.get("volumeSnapshotClassName") or "")
    if named is not None and named.get("driver") == driver:
        return named
    defaults = [
        c
        for c in classes
        if c.get("driver") == driver
        and (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS) == "true"
    ]
    if len(defaults) != 1:
        found_text = "no default" if not defaults else f"{len(defaults)} default"
        raise errors.PermanentError(
            f"{found_text} VolumeSnapshotClass for CSI driver {driver}: name one in "
            "volumeSnapshotClasses, or mark one default"
        )
    return defaults[0]


def _start(ctx: registry.StepContext, api: k8s.ApiClient) -> None:
    """Choose the volumes and their classes, check them, then create the snapshots."""
    classes = objects.items(
        api, objects.path(SNAPSHOT_API, "volumesnapshotclasses"), what="VolumeSnapshotClasses"
    )
    if ctx.params.get("volumeSnapshotClassName") and not any(
        c["metadata"]["name"] == ctx.params["volumeSnapshotClassName"] for c in classes
    ):
        raise errors.PermanentError(
            f"VolumeSnapshotClass {ctx.params['volumeSnapshotClassName']} not found"
        )
    chosen, skipped = [], []
    for claim in _claims(ctx, api):
        ns, pvc = claim["metadata"]["namespace"], claim["metadata"]["name"]
        driver, why = _driver(api, claim)
        if why:
            skipped.append({"namespace": ns, "persistentVolumeClaim": pvc, "reason": why})
            continue
        chosen.append((ns, pvc, driver, _class_for(ctx, classes, driver)))
    if ctx.run_context.get("hook") == DELETE_HOOK:
        # Every class, checked before anything is made: all snapshots must outlive the cluster.
        for _, _, _, snapshot_class in chosen:
            policy = snapshot_class.get("deletionPolicy")
            if policy != "Retain":
                name = snapshot_class["metadata"]["name"]
                raise errors.PermanentError(
                    f"VolumeSnapshotClass {name} has deletionPolicy {policy}: {RETAIN_ADVICE}"
                )
    volumes = []
    for ns, pvc, driver, snapshot_class in chosen:
        # A PVC's name is unique in its namespace, so the snapshot's name is too.
        name = ctx.object_name(pvc)
        class_name = snapshot_class["metadata"]["name"]
        body = {
            "apiVersion": SNAPSHOT_API,
            "kind": "VolumeSnapshot",
            "metadata": {"name": name, "namespace": ns, "labels": objects.labels(ctx)},
            "spec": {
                "source": {"persistentVolumeClaimName": pvc},
                "volumeSnapshotClassName": class_name,
            },
        }
        collection = objects.path(SNAPSHOT_API, "volumesnapshots", ns)
        objects.ensure(api, collection, body, what=f"VolumeSnapshot {ns}/{name}")
        volumes.append(
            {
                "namespace": ns,
                "persistentVolumeClaim": pvc,
                "volumeSnapshot": name,
                "driver": driver,
                "volumeSnapshotClassName": class_name,
            }
        )
    ctx.memo["volumes"], ctx.memo["skipped"] = volumes, skipped


def _record(api: k8s.ApiClient, volume: JSON, status: JSON) -> JSON:
    """What a ready snapshot's VolumeSnapshotContent tells, to import it elsewhere."""
    content_name = status.get("boundVolumeSnapshotContentName")
    path = objects.path(SNAPSHOT_API, "volumesnapshotcontents", name=content_name or "")
    content = objects.get(api, path, what=f"VolumeSnapshotContent {content_name}") or {}
    spec, content_status = content.get("spec") or {}, content.get("status") or {}
    record = {
        "volumeSnapshotContent": content_name,
        "snapshotHandle": content_status.get("snapshotHandle"),
        "driver": spec.get("driver", volume["driver"]),
        "restoreSize": status.get("restoreSize"),
        "restoreSizeBytes": content_status.get("restoreSize"),
        "volumeSnapshotClassName": spec.get("volumeSnapshotClassName"),
        "deletionPolicy": spec.get("deletionPolicy"),
    }
    return {key: value for key, value in record.items() if value is not None}


def _moment(value: Any) -> datetime.datetime | None:
    """A metav1.Time (RFC 3339, UTC), or None."""
    try:
        moment = datetime.datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def _current_error(status: JSON) -> str:
    """The snapshot's error, unless it dates from before the snapshot was cut."""
    error = status.get("error") or {}
    message = str(error.get("message") or "")[:300]
    cut, when = _moment(status.get("creationTime")), _moment(error.get("time"))
    if message and cut is not None and (when is None or when <= cut):
        return ""  # the sidecar keeps it until readyToUse: stale
    return message


def run(ctx: registry.StepContext, api: k8s.ApiClient) -> registry.Outcome:
    if "volumes" not in ctx.memo:
        _start(ctx, api)
    results, erring = [], []
    for volume in ctx.memo["volumes"]:
        ns, name = volume["namespace"], volume["volumeSnapshot"]
        what = f"VolumeSnapshot {ns}/{name}"
        found = objects.get(api, objects.path(SNAPSHOT_API, "volumesnapshots", ns, name), what=what)
        if found is None:
            raise errors.PermanentError(f"{what} was deleted")
        status = found.get("status") or {}
        result: JSON = {**volume, "readyToUse": bool(status.get("readyToUse"))}
        if result["readyToUse"]:
            result.update(_record(api, volume, status), result="ready")
        elif message := _current_error(status):
            # Not final: the snapshot controller tries again and clears it on success.
            result.update(result="error", error=message)
            erring.append(f"{what}: {message}")
        else:
            result["result"] = "cut" if status.get("creationTime") else "pending"
        results.append(result)
    output = {"backend": "csi", "volumes": results, "skipped": ctx.memo.get("skipped", [])}
    ready = sum(1 for r in results if r["result"] == "ready")
    if ready == len(results):
        return registry.Done(output)
    message = f"{ready} of {len(results)} volume snapshots ready"
    if cut := sum(1 for r in results if r["result"] == "cut"):
        message += f", {cut} cut and not yet ready to use"
    if erring:
        message += f"; the snapshot controller reports, and retries: {erring[0]}"
    waiting = next(r for r in results if r["result"] != "ready")
    reason = {
        "error": "reports an error",
        "cut": "was cut but is not ready to use",
    }.get(waiting["result"], "is not ready")
    return objects.wait_or_fail(
        ctx,
        after=ctx.params["pollSeconds"],
        message=message,
        output=output,
        failure=(
            f"VolumeSnapshot {waiting['namespace']}/{waiting['volumeSnapshot']} {reason} at "
            "the step's timeout (see the step's output)"
        ),
    )
