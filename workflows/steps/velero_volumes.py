"""Whether a Completed Velero Backup backed up the volumes it covers, read as Velero wrote it.

Used by `workflows.steps.velero_backups`. Follows vmware-tanzu/velero main at d30d389b
(v1.18.1's code):

- What a Backup covers is its `spec` after the server's defaults (backup_controller.go
  prepareBackupRequest): `includedNamespaces` (`*`: all; a pattern such as `app-*` is
  expanded against the live namespaces, `workflows.steps.namespace_patterns`), less
  `excludedNamespaces`, to which Velero adds every namespace labelled
  `velero.io/exclude-from-backup=true`; its
  `labelSelector`; and not a PVC labelled so (pkg/backup/item_backupper.go). Of those, the
  Bound PVCs hold data to back up.
- A volume is backed up either by a snapshot or by a file system backup
  (internal/volumehelper: a volume a Pod opts into file system backup, or every mounted one
  with `defaultVolumesToFsBackup`, is not snapshotted). Completed snapshots are
  `volumeSnapshotsCompleted` (native) plus `csiVolumeSnapshotsCompleted`, or with
  `snapshotMoveData` the completed data uploads `backupItemOperationsCompleted`: Velero
  counts no CSI snapshot then (pkg/backup/snapshots.go GetBackupCSIResources). A file
  system backup is a Completed PodVolumeBackup labelled `velero.io/backup-name` and
  `velero.io/pvc-uid` (pkg/podvolume/backupper.go).
- With `snapshotVolumes: false` only the volumes Pods mount can be backed up (by file
  system backup): nothing says which of the others should have been, so no count is made.
"""

from __future__ import annotations

from typing import Any

from workflows import durations, errors
from workflows.kube import k8s
from workflows.steps import namespace_patterns, objects

VELERO_API = "velero.io/v1"
EXCLUDE_LABEL = "velero.io/exclude-from-backup"
JSON = dict[str, Any]


def _count(status: JSON, key: str) -> int:
    return int(status.get(key) or 0)


def snapshots(spec: JSON, status: JSON) -> tuple[int, int]:
    """(attempted, completed) volume snapshots, as Velero counts them for this spec."""
    if spec.get("snapshotMoveData"):
        csi = ("backupItemOperationsAttempted", "backupItemOperationsCompleted")
    else:
        csi = ("csiVolumeSnapshotsAttempted", "csiVolumeSnapshotsCompleted")
    attempted = _count(status, "volumeSnapshotsAttempted") + _count(status, csi[0])
    return attempted, _count(status, "volumeSnapshotsCompleted") + _count(status, csi[1])


def covered(api: k8s.ApiClient, spec: JSON) -> list[JSON]:
    """The Bound PVCs the Backup covers; its namespaces may be patterns Velero expands."""
    selector = (spec.get("labelSelector") or {}).get("matchLabels") or None
    included = spec.get("includedNamespaces") or ["*"]
    excluded = spec.get("excludedNamespaces") or []
    names = namespace_patterns.literal(included)
    found: list[JSON] = []
    for ns in names if names is not None else [None]:
        collection = objects.path("v1", "persistentvolumeclaims", ns)
        found += objects.items(api, collection, what="PersistentVolumeClaims", selector=selector)
    return [
        claim
        for claim in found
        if namespace_patterns.selects(included, excluded, claim["metadata"]["namespace"])
        and (claim["metadata"].get("labels") or {}).get(EXCLUDE_LABEL) != "true"
        and (claim.get("status") or {}).get("phase") == "Bound"
    ]


def file_system_backups(api: k8s.ApiClient, namespace: str, backup: str) -> set[str]:
    """The uids of the PVCs that Completed PodVolumeBackups of the Backup backed up."""
    collection = objects.path(VELERO_API, "podvolumebackups", namespace)
    found = objects.items(
        api, collection, what="PodVolumeBackups", selector={"velero.io/backup-name": backup}
    )
    return {
        pvb["metadata"]["labels"]["velero.io/pvc-uid"]
        for pvb in found
        if "velero.io/pvc-uid" in (pvb["metadata"].get("labels") or {})
        and (pvb.get("status") or {}).get("phase") == "Completed"
    }


def check(api: k8s.ApiClient, found: JSON, what: str, output: JSON) -> None:
    """A Completed Backup that did not back up the volumes it covers fails the step; the
    output gets the figures."""
    spec, status = found.get("spec") or {}, found.get("status") or {}
    attempted, completed = snapshots(spec, status)
    if attempted > completed:
        raise errors.PermanentError(
            f"{what}: {attempted - completed} of {attempted} volume snapshots did not complete",
            output=output,
        )
    if spec.get("snapshotVolumes") is False:
        output["volumeCheck"] = "not checked: snapshotVolumes is false"
        return
    claims = covered(api, spec)
    meta = found["metadata"]
    uids = {claim["metadata"]["uid"] for claim in claims}
    by_fs = len(uids & file_system_backups(api, meta["namespace"], meta["name"]))
    output.update(volumesCovered=len(claims), volumesSnapshotted=completed, volumesByFsBackup=by_fs)
    if completed + by_fs < len(claims):
        raise errors.PermanentError(
            f"{what} completed but backed up {completed + by_fs} of "
            f"{durations.count(len(claims), 'volume')} "
            "(Velero skips a volume it has no snapshotter for)",
            output=output,
        )
