"""Velero in the Kubernetes API emulator: its backup controller, and its restarts.

`VeleroServer` (switched on by a test: `kube.add_controller(...)`) processes the
`velero.io/v1` Backups of its namespace as vmware-tanzu/velero does
(pkg/apis/velero/v1/backup_types.go for the fields and phases):

- Validation (pkg/controller/backup_controller.go, prepareBackupRequest): a storage
  location that does not exist gives `FailedValidation` with Velero's `validationErrors`.
- Otherwise `InProgress` (with startTimestamp), and `duration` seconds later `Completed`,
  or `PartiallyFailed` when some volume snapshots failed (each one an error).
- Volumes (pkg/backup/item_backupper.go, takePVSnapshot; pkg/controller/
  backup_controller.go): with `snapshotVolumes` (not false) and no file system backup, each
  Bound volume of the included namespaces is snapshotted by the volume snapshotter there is:
  `csi` (CSI volumes only: csiVolumeSnapshotsAttempted/Completed), `native`
  (volumeSnapshotsAttempted/Completed), or none, in which case Velero skips the volume
  ("no applicable volumesnapshotter found") and the Backup still ends `Completed`.
  With `snapshotMoveData` each CSI snapshot is also a data upload (a backup item
  operation). `failing` volumes fail their snapshot.
- A restart (pkg/cmd/server/server.go, markInProgressBackupsFailed): `restarts` times, the
  server restarts while a Backup is InProgress and marks every InProgress Backup `Failed`
  with its failureReason; it never resumes them.
"""

from __future__ import annotations

import datetime

from tests.support.kube_semantics import JSON, label_selector_matches
from tests.support.kube_store import Change, Store

BACKUPS = ("velero.io", "v1", "backups")
RESTART_REASON = (
    'found a backup with status "InProgress" during the server starting, mark it as "Failed"'
)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class VeleroServer:
    """Velero's backup controller, scripted: duration, snapshotter, failures, restarts."""

    def __init__(
        self,
        namespace: str = "velero",
        *,
        duration: float = 0.3,
        volume_snapshotter: str | None = "csi",
        failing: int = 0,
        restarts: int = 0,
        locations: tuple[str, ...] = ("default",),
    ) -> None:
        self.namespace = namespace
        self.duration = duration
        self.volume_snapshotter = volume_snapshotter
        self.failing = failing
        #: How many times the server restarts during an InProgress Backup.
        self.restarts = restarts
        self.locations = locations

    def react(self, store: Store, change: Change) -> None:
        if (change.group, change.plural) != ("velero.io", "backups") or change.type != "ADDED":
            return
        meta = change.new["metadata"]
        if meta.get("namespace") != self.namespace or (change.new.get("status") or {}).get("phase"):
            return
        name, spec = meta["name"], change.new.get("spec") or {}
        location = spec.get("storageLocation") or ""
        if (location or "default") not in self.locations:
            missing = location or "default"
            which = f"the default {missing} was not found" if location else (
                f"the server default {missing} does not exist"
            )  # fmt: skip
            error = (
                f"an existing backup storage location was not specified at backup creation time"
                f" and {which}. Please address this issue (see `velero backup-location -h` for"
                f" options) and create a new backup. Error: backupstoragelocations.velero.io"
                f' "{missing}" not found'
            )
            status = {"phase": "FailedValidation", "validationErrors": [error]}
            store.set_status(BACKUPS, self.namespace, name, status)
            return
        store.set_status(
            BACKUPS, self.namespace, name, {"phase": "InProgress", "startTimestamp": _now()}
        )
        uid = meta["uid"]
        if self.restarts > 0:
            self.restarts -= 1
            store.later(self.duration / 2, lambda: self._restart(store))
        store.later(self.duration, lambda: self._complete(store, name, uid, spec))

    def _restart(self, store: Store) -> None:
        for key, backup in list(store.objects.items()):
            if key[:3] != ("velero.io", "backups", self.namespace):
                continue
            if (backup.get("status") or {}).get("phase") == "InProgress":
                status = {
                    "phase": "Failed",
                    "failureReason": RESTART_REASON,
                    "completionTimestamp": _now(),
                }
                store.set_status(BACKUPS, self.namespace, key[3], status)

    def _volumes(self, store: Store, spec: JSON) -> list[JSON]:
        """The Bound volumes of the Backup's namespaces and labels."""
        included = spec.get("includedNamespaces") or ["*"]
        labels = (spec.get("labelSelector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        found = []
        for key, claim in sorted(store.objects.items()):
            if key[:2] != ("", "persistentvolumeclaims"):
                continue
            if "*" not in included and key[2] not in included:
                continue
            if not label_selector_matches(selector, claim["metadata"].get("labels") or {}):
                continue
            volume_name = (claim.get("spec") or {}).get("volumeName", "")
            volume = store.objects.get(("", "persistentvolumes", "", volume_name))
            if (claim.get("status") or {}).get("phase") == "Bound" and volume is not None:
                found.append(volume)
        return found

    def _complete(self, store: Store, name: str, uid: str, spec: JSON) -> None:
        backup = store.objects.get(("velero.io", "backups", self.namespace, name))
        if backup is None or backup["metadata"]["uid"] != uid:
            return
        if (backup.get("status") or {}).get("phase") != "InProgress":
            return  # failed by a restart meanwhile: never resumed
        counts = {
            "volumeSnapshotsAttempted": 0,
            "volumeSnapshotsCompleted": 0,
            "csiVolumeSnapshotsAttempted": 0,
            "csiVolumeSnapshotsCompleted": 0,
            "backupItemOperationsAttempted": 0,
            "backupItemOperationsCompleted": 0,
        }
        snapshots = spec.get("snapshotVolumes") is not False and not spec.get(
            "defaultVolumesToFsBackup"
        )
        failures = self.failing
        for volume in self._volumes(store, spec) if snapshots else []:
            csi = bool((volume.get("spec") or {}).get("csi"))
            if self.volume_snapshotter == "csi" and csi:
                prefix = "csiVolumeSnapshots"
            elif self.volume_snapshotter == "native":
                prefix = "volumeSnapshots"
            else:
                continue  # skipped: no applicable volume snapshotter
            counts[f"{prefix}Attempted"] += 1
            if failures > 0:
                failures -= 1
                continue
            counts[f"{prefix}Completed"] += 1
            if prefix == "csiVolumeSnapshots" and spec.get("snapshotMoveData"):
                counts["backupItemOperationsAttempted"] += 1
                counts["backupItemOperationsCompleted"] += 1
        errors = self.failing - failures
        # The status fields are omitempty: a zero count is absent.
        counts["errors"] = errors
        status = {
            "phase": "PartiallyFailed" if errors else "Completed",
            "completionTimestamp": _now(),
            **{key: value for key, value in counts.items() if value},
        }
        store.set_status(BACKUPS, self.namespace, name, status)
