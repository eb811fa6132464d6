"""The velero backend of `backup_pvs`: one Velero Backup, started again when Velero drops it.

Follows vmware-tanzu/velero main at d30d389b (2026-05-20; the backup, queue, operations and
finalizer controllers of v1.18.1), pkg/apis/velero/v1/backup_types.go for the fields and
phases; the emulator's Velero (tests/support/kube_velero.py) is written from the same code.

- Velero moves a Backup through `New`, `Queued`, `ReadyToStart` (the queue of v1.18),
  `InProgress`, `WaitingForPluginOperations[PartiallyFailed]` and
  `Finalizing[PartiallyFailed]` to `Completed`, `PartiallyFailed`, `Failed` or
  `FailedValidation`; `Deleting` when someone deletes it. The step waits through the first
  ones; one that does not end (queued behind another Backup, an operation still running)
  fails the step at its timeout, naming the phase.
- The Backup is judged as Velero wrote it, not by the step's parameters: prepareBackupRequest
  writes the server's defaults (`--default-volumes-to-fs-backup`,
  `--default-snapshot-move-data`, the default storage location, the excluded namespaces)
  into its `spec` (`workflows.steps.velero_volumes` counts its volumes from that spec).
- A Velero server that restarts marks every InProgress Backup `Failed` and never resumes it
  (pkg/cmd/server/server.go, markInProgressBackupsFailed). A `Failed` Backup is therefore
  started again under a new name (`<name>-a2`, ...), up to `backupAttempts` Backups in all.
- `FailedValidation` whose every validation error heals (prepareBackupRequest: the storage
  location "is in Unavailable status.", or reading the location, the namespaces or the
  snapshot locations failed) is not final either: the step waits until the
  BackupStorageLocation the Backup names is `Available` again (Velero revalidates it every
  `--store-validation-frequency`, a minute by default), then starts a new Backup; bounded by
  `backupAttempts` Backups and by the step's timeout. Any other validation error would fail
  the same spec again: the step fails.
- `PartiallyFailed` passes only with `allowPartiallyFailed`.
- A failure carries Velero's `failureReason` and `validationErrors`, bounded.
"""

from __future__ import annotations

import re
from typing import Any

from workflows import errors
from workflows.kube import k8s
from workflows.steps import objects, registry, velero_volumes

VELERO_API = velero_volumes.VELERO_API
JSON = dict[str, Any]
#: Status fields the output keeps, as Velero names them.
COUNTS = (
    "errors",
    "warnings",
    "queuePosition",
    "volumeSnapshotsAttempted",
    "volumeSnapshotsCompleted",
    "csiVolumeSnapshotsAttempted",
    "csiVolumeSnapshotsCompleted",
    "backupItemOperationsAttempted",
    "backupItemOperationsCompleted",
    "backupItemOperationsFailed",
)
FINAL = ("Completed", "PartiallyFailed", "Failed", "FailedValidation", "Deleting")
#: prepareBackupRequest's validation errors that the next Backup may not meet.
HEALING = re.compile(
    r"backup can't be created because BackupStorageLocation \S+ is in Unavailable status\."
    r"|error getting backup storage location: .*"
    r"|error getting namespace list: .*"
    r"|error listing volume snapshot locations: .*",
    re.DOTALL,
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


def _failure(status: JSON) -> JSON:
    return {key: status[key] for key in ("failureReason", "validationErrors") if status.get(key)}


def _heals(status: JSON) -> bool:
    found = [str(e) for e in status.get("validationErrors") or []]
    return bool(found) and all(HEALING.fullmatch(e) for e in found)


def _location_back(ctx: registry.StepContext, api: k8s.ApiClient, output: JSON) -> bool:
    """True when the storage location the last Backup failed on is Available again (or gone:
    the next Backup's validation then says so in Velero's words)."""
    ns, location = ctx.params["veleroNamespace"], ctx.memo["location"]
    what = f"BackupStorageLocation {ns}/{location}"
    path = objects.path(VELERO_API, "backupstoragelocations", ns, location)
    found = objects.get(api, path, what=what)
    phase = ((found or {}).get("status") or {}).get("phase") or "Unavailable"
    output["storageLocation"] = {"name": location, "phase": phase if found else "not found"}
    return found is None or phase == "Available"


def _next(ctx: registry.StepContext, api: k8s.ApiClient, output: JSON, status: JSON) -> None:
    """Record the attempt that ended, and start the next Backup."""
    attempt = int(ctx.memo["attempt"])
    ctx.memo["attempts"].append(output["attempts"][-1] | _failure(status))
    _create(ctx, api, attempt + 1)


def run(ctx: registry.StepContext, api: k8s.ApiClient) -> registry.Outcome:
    ns, attempts = ctx.params["veleroNamespace"], ctx.params["backupAttempts"]
    if "attempt" not in ctx.memo:
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
    backup.update(_failure(status))
    output: JSON = {
        "backend": "velero",
        "backup": backup,
        "attempts": [*ctx.memo["attempts"], {"name": name, "phase": phase}],
    }
    if phase == "FailedValidation" and _heals(status) and attempt < attempts:
        ctx.memo.setdefault("location", (found.get("spec") or {}).get("storageLocation", ""))
        if _location_back(ctx, api, output):
            del ctx.memo["location"]
            _next(ctx, api, output, status)
            message = f"{what} failed validation; started {_name(ctx, attempt + 1)} "
            message += f"({attempt + 1} of {attempts} attempts)"
            return registry.Poll(after=ctx.params["pollSeconds"], message=message, output=output)
        location = f"BackupStorageLocation {ns}/{ctx.memo['location']}"
        return objects.wait_or_fail(
            ctx,
            after=ctx.params["pollSeconds"],
            message=f"{what} failed validation; waiting for {location} to be Available to "
            f"start Backup {attempt + 1} of {attempts}",
            output=output,
            failure=f"{location} is not Available at the step's timeout{_reason(status)}",
        )
    if phase == "Completed":
        velero_volumes.check(api, found, what, output)
        return registry.Done(output)
    if phase == "PartiallyFailed" and ctx.params["allowPartiallyFailed"]:
        return registry.Done(output)
    if phase == "Failed" and attempt < attempts:
        # A restarted Velero never resumes it: a new Backup, under a new name.
        _next(ctx, api, output, status)
        message = f"{what} failed; started {_name(ctx, attempt + 1)} ({attempt + 1} of "
        message += f"{attempts} attempts)"
        return registry.Poll(after=ctx.params["pollSeconds"], message=message, output=output)
    if phase in FINAL:
        count = f" after {attempt} attempts" if attempt > 1 else ""
        raise errors.PermanentError(
            f"{what} ended in phase {phase}{count}{_reason(status)}", output=output
        )
    return objects.wait_or_fail(
        ctx,
        after=ctx.params["pollSeconds"],
        message=f"{what} is {phase}",
        output=output,
        failure=f"{what} is still {phase} at the step's timeout",
    )
