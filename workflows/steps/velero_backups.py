"""The velero backend of `backup_pvs`: one Velero Backup, started again if Velero drops it.

Follows vmware-tanzu/velero (pkg/apis/velero/v1/backup_types.go for the spec, the phases
and the status counts):

- A Velero server that restarts marks every InProgress Backup `Failed` and never resumes it
  (pkg/cmd/server/server.go, markInProgressBackupsFailed). A `Failed` Backup is therefore
  started again under a new name (`<name>-a2`, ...), up to `backupAttempts` Backups in all.
  `FailedValidation` is not retried: the same spec would fail the same way.
- `Completed` does not mean the volumes were backed up: Velero skips a volume it has no
  snapshotter for (pkg/backup/item_backupper.go, takePVSnapshot: "no applicable
  volumesnapshotter found") and still completes. With `snapshotVolumes` and no file system
  backup, the step counts the Bound PVCs the Backup covers and requires as many completed
  volume snapshots (`volumeSnapshotsCompleted` + `csiVolumeSnapshotsCompleted`, or with
  `snapshotMoveData` the completed data uploads, `backupItemOperationsCompleted`).
- `PartiallyFailed` passes only with `allowPartiallyFailed`.
- A failure carries Velero's `failureReason` and `validationErrors`, bounded.
"""

from __future__ import annotations

from typing import Any

from workflows import errors
from workflows.kube import k8s
from workflows.steps import objects, registry

VELERO_API = "velero.io/v1"
JSON = dict[str, Any]
#: Status fields the output keeps, as Velero names them.
COUNTS = (
    "errors",
    "warnings",
    "volumeSnapshotsAttempted",
    "volumeSnapshotsCompleted",
    "csiVolumeSnapshotsAttempted",
    "csiVolumeSnapshotsCompleted",
    "backupItemOperationsAttempted",
    "backupItemOperationsCompleted",
    "backupItemOperationsFailed",
)
#: What a failure message quotes of Velero's own words.
MAX_REASON_CHARS, MAX_VALIDATION_ERRORS = 300, 3


def _name(ctx: registry.StepContext, attempt: int) -> str:
    return ctx.object_name() if attempt == 1 else ctx.object_name(f"a{attempt}")


def _spec(ctx: registry.StepContext) -> JSON:
    params = ctx.params
    spec: JSON = {
        "includedNamespaces": sorted(set(params.get("namespaces") or [])) or ["*"],
        "snapshotVolumes": params["snapshotVolumes"],
        "ttl": params["ttl"],
    }
    if params.get("labelSelector"):
        spec["labelSelector"] = {"matchLabels": dict(params["labelSelector"])}
    for key in ("storageLocation", "defaultVolumesToFsBackup", "snapshotMoveData"):
        if params.get(key) is not None:
            spec[key] = params[key]
    return spec


def _create(ctx: registry.StepContext, api: k8s.ApiClient, attempt: int) -> None:
    ns, name = ctx.params["veleroNamespace"], _name(ctx, attempt)
    body = {
        "apiVersion": VELERO_API,
        "kind": "Backup",
        "metadata": {"name": name, "namespace": ns, "labels": objects.labels(ctx)},
        "spec": _spec(ctx),
    }
    objects.ensure(api, objects.path(VELERO_API, "backups", ns), body, what=f"Backup {ns}/{name}")
    ctx.memo["attempt"] = attempt


def _volumes(ctx: registry.StepContext, api: k8s.ApiClient) -> int:
    """How many Bound PVCs the Backup covers (its namespaces and labels)."""
    selector = ctx.params.get("labelSelector") or None
    namespaces = sorted(set(ctx.params.get("namespaces") or [])) or [None]
    count = 0
    for ns in namespaces:
        collection = objects.path("v1", "persistentvolumeclaims", ns)
        claims = objects.items(api, collection, what="PersistentVolumeClaims", selector=selector)
        count += sum(1 for c in claims if (c.get("status") or {}).get("phase") == "Bound")
    return count


def _expects_snapshots(ctx: registry.StepContext) -> bool:
    return bool(ctx.params["snapshotVolumes"]) and not ctx.params.get("defaultVolumesToFsBackup")


def _reason(status: JSON) -> str:
    """Velero's failureReason and validationErrors, bounded (they reach the message)."""
    parts = []
    if status.get("failureReason"):
        parts.append(str(status["failureReason"])[:MAX_REASON_CHARS])
    found = [str(e)[:MAX_REASON_CHARS] for e in status.get("validationErrors") or []]
    parts += found[:MAX_VALIDATION_ERRORS]
    if len(found) > MAX_VALIDATION_ERRORS:
        parts.append(f"and {len(found) - MAX_VALIDATION_ERRORS} more")
    return f": {'; '.join(parts)}" if parts else ""


def _check_volumes(ctx: registry.StepContext, what: str, status: JSON, output: JSON) -> None:
    """A Completed Backup that did not back up the volumes it covers fails the step."""
    attempted = int(status.get("volumeSnapshotsAttempted") or 0) + int(
        status.get("csiVolumeSnapshotsAttempted") or 0
    )
    completed = int(status.get("volumeSnapshotsCompleted") or 0) + int(
        status.get("csiVolumeSnapshotsCompleted") or 0
    )
    if ctx.params.get("snapshotMoveData"):
        completed = max(completed, int(status.get("backupItemOperationsCompleted") or 0))
    if attempted > completed:
        raise errors.PermanentError(
            f"{what}: {attempted - completed} of {attempted} volume snapshots did not complete",
            output=output,
        )
    expected = int(ctx.memo.get("volumes") or 0)
    if _expects_snapshots(ctx) and completed < expected:
        raise errors.PermanentError(
            f"{what} completed but backed up {completed} of {expected} volumes (Velero skips a "
            "volume it has no snapshotter for)",
            output=output,
        )


def run(ctx: registry.StepContext, api: k8s.ApiClient) -> registry.Outcome:
    ns = ctx.params["veleroNamespace"]
    if "attempt" not in ctx.memo:
        ctx.memo["volumes"] = _volumes(ctx, api) if _expects_snapshots(ctx) else 0
        ctx.memo["attempts"] = []
        _create(ctx, api, 1)
    attempt = int(ctx.memo["attempt"])
    name = _name(ctx, attempt)
    what = f"Backup {ns}/{name}"
    found = objects.get(api, objects.path(VELERO_API, "backups", ns, name), what=what)
    if found is None:
        raise errors.PermanentError(f"{what} was deleted")
    status = found.get("status") or {}
    phase = status.get("phase") or "New"
    backup: JSON = {"namespace": ns, "name": name, "phase": phase}
    backup.update({key: status[key] for key in COUNTS if key in status})
    for key in ("failureReason", "validationErrors"):
        if status.get(key):
            backup[key] = status[key]
    output: JSON = {
        "backend": "velero",
        "backup": backup,
        "attempts": [*ctx.memo["attempts"], {"name": name, "phase": phase}],
    }
    if _expects_snapshots(ctx):
        output["volumesCovered"] = ctx.memo["volumes"]
    else:
        output["volumeCheck"] = "not checked: no volume snapshots (file system backup, or none)"
    if phase == "Completed":
        _check_volumes(ctx, what, status, output)
        return registry.Done(output)
    if phase == "PartiallyFailed" and ctx.params["allowPartiallyFailed"]:
        return registry.Done(output)
    if phase == "Failed" and attempt < ctx.params["backupAttempts"]:
        # A restarted Velero never resumes it: a new Backup, under a new name.
        ctx.memo["attempts"].append({"name": name, "phase": phase, **_failure(status)})
        _create(ctx, api, attempt + 1)
        message = f"{what} failed; started {_name(ctx, attempt + 1)} ({attempt + 1} of "
        message += f"{ctx.params['backupAttempts']} attempts)"
        return registry.Poll(after=ctx.params["pollSeconds"], message=message, output=output)
    if phase in ("Failed", "PartiallyFailed", "FailedValidation"):
        count = f" after {attempt} attempts" if phase == "Failed" and attempt > 1 else ""
        raise errors.PermanentError(
            f"{what} ended in phase {phase}{count}{_reason(status)}", output=output
        )
    return registry.Poll(
        after=ctx.params["pollSeconds"], message=f"{what} is {phase}", output=output
    )


def _failure(status: JSON) -> JSON:
    return {"failureReason": status["failureReason"]} if status.get("failureReason") else {}
