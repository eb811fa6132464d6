"""Velero in the Kubernetes API emulator: its backup controllers, written from Velero's code.

Follows vmware-tanzu/velero main at d30d389b (2026-05-20); its backup, queue, operations and
finalizer controllers are those of v1.18.1 (main only normalises an empty includedNamespaces
before, not after, validating it). `VeleroServer` (switched on by a test:
`kube.add_controller(...)`) plays the Velero server of one namespace over its `velero.io/v1`
Backups, as these controllers do, each handing the Backup on by its phase:

- Queue (pkg/controller/backup_queue_controller.go, Reconcile): a Backup with no phase (or
  `New`) becomes `Queued` with the next `queuePosition`. A Queued Backup whose namespaces
  overlap no running or earlier Backup's becomes `ReadyToStart` (position 0, the others
  renumbered) while fewer than `concurrent_backups` (`--concurrent-backups`, 1) are
  ReadyToStart or InProgress (backup_tracker.go, RunningCount).
- Backup controller (backup_controller.go, Reconcile and prepareBackupRequest): writes the
  server's defaults into the Backup's `spec`, in the same patch as its phase: `ttl`
  (`--default-backup-ttl`, 720h), `defaultVolumesToFsBackup` (`--default-volumes-to-fs-backup`),
  `snapshotMoveData` (`--default-snapshot-move-data`), `storageLocation` (the
  BackupStorageLocation marked default, else `--default-backup-storage-location`),
  `csiSnapshotTimeout` (10m), `itemOperationTimeout` (4h), `volumeGroupSnapshotLabelKey`,
  `includedNamespaces` (`["*"]` when empty), `excludedNamespaces` (plus every namespace
  labelled `velero.io/exclude-from-backup=true`), the auto-excluded snapshot resources, the
  label `velero.io/storage-location`, and status `version`, `formatVersion`, `expiration`.
  Its validation errors, word for word: a storage location not found (the server default, or
  the one named), one in read-only mode, one not `Available` ("... is in Unavailable
  status."), labelSelector with orLabelSelectors. Any gives `FailedValidation`; else
  `InProgress` with `startTimestamp`.
- Namespace lists (pkg/util/wildcard/expand.go, pkg/util/collections/includes_excludes.go):
  a name with `*`, `?` or `[` is a glob pattern matched against the live namespaces, in the
  includes and the excludes; patterns that match nothing back up nothing; the spec keeps
  them. ValidateNamespaceIncludesExcludes runs after the labelled namespaces were added to
  the excludes, so a labelled namespace the Backup names fails validation, in its words.
- runBackup (`duration` seconds later): each Bound PVC the Backup covers (its namespaces, its
  labels, not labelled `velero.io/exclude-from-backup=true`: pkg/backup/item_backupper.go)
  is backed up by a PodVolumeBackup when a Pod that mounts it opts the volume into file
  system backup (internal/volumehelper shouldPerformFSBackupLegacy: annotation
  `backup.velero.io/backup-volumes`, or every volume not in
  `backup.velero.io/backup-volumes-excludes` when `defaultVolumesToFsBackup`;
  pkg/podvolume/backupper.go labels it `velero.io/backup-name` and `velero.io/pvc-uid`).
  Otherwise, unless `snapshotVolumes` is false, it is snapshotted by the snapshotter there
  is: `csi` (CSI volumes, EnableCSI) as an asynchronous operation on a VolumeSnapshot, or
  with `snapshotMoveData` a data upload; `native` (volumeSnapshots*, done at once); none:
  skipped ("no applicable volumesnapshotter found"), and the Backup still completes. The
  counts are Velero's: `csiVolumeSnapshotsAttempted` is 0 with `snapshotMoveData`
  (pkg/backup/snapshots.go GetBackupCSIResources), `backupItemOperationsAttempted` counts
  the operations. Phase `WaitingForPluginOperations` while operations run, else
  `Finalizing`; `...PartiallyFailed` with errors. `failing` snapshots fail.
- Operations (backup_operations_controller.go): `operation_seconds` later the operations are
  done (`backupItemOperationsCompleted`/`Failed`, an error each failure) and the Backup is
  `Finalizing` or `FinalizingPartiallyFailed`.
- Finalizer (backup_finalizer_controller.go): `Completed` or `PartiallyFailed`, with
  `completionTimestamp` and `csiVolumeSnapshotsCompleted` (updateCSIVolumeSnapshotsCompleted:
  the completed operations on VolumeSnapshots, none with `snapshotMoveData`).
- Restart (pkg/cmd/server/server.go, markInProgressBackupsFailed): `restarts` times the
  server restarts while a Backup is InProgress and marks every InProgress Backup `Failed`
  with its failureReason; it never resumes them.

BackupStorageLocations are objects (`storage_location`); a test flips one's `status.phase`
as the BSL controller does (backup_storage_location_controller.go: `Available`, or
`Unavailable` with a message). The Velero CRDs have no status subresource
(config/crd/v1/bases): the controllers patch spec and status together.
"""

from __future__ import annotations

import copy
import datetime
import fnmatch
import re

from tests.support.kube_semantics import JSON, label_selector_matches
from tests.support.kube_store import Change, Store

GROUP = "velero.io"
BACKUPS = (GROUP, "v1", "backups")
LOCATIONS = (GROUP, "v1", "backupstoragelocations")
POD_VOLUME_BACKUPS = (GROUP, "v1", "podvolumebackups")
RESTART_REASON = (
    'found a backup with status "InProgress" during the server starting, mark it as "Failed"'
)
EXCLUDE_LABEL = "velero.io/exclude-from-backup"
FS_BACKUP_VOLUMES = "backup.velero.io/backup-volumes"
FS_BACKUP_EXCLUDES = "backup.velero.io/backup-volumes-excludes"
RUNNING = ("ReadyToStart", "InProgress")
#: What Velero counts in a Backup's status (all `omitempty`: a zero is absent).
COUNTS = (
    "volumeSnapshotsAttempted",
    "volumeSnapshotsCompleted",
    "csiVolumeSnapshotsAttempted",
    "backupItemOperationsAttempted",
    "errors",
)


def _now(later: float = 0) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=later)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def duration_seconds(text: str) -> float:
    """Seconds of a Go duration ("720h0m0s", "10m", "1.5s")."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"unsupported duration {text!r}")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


class VeleroServer:
    """A Velero server's backup controllers with its flags; snapshotter, failures, restarts."""

    def __init__(
        self,
        namespace: str = "velero",
        *,
        duration: float = 0.3,
        operation_seconds: float = 0.2,
        volume_snapshotter: str | None = "csi",
        failing: int = 0,
        restarts: int = 0,
        locations: tuple[str, ...] = ("default",),
        default_volumes_to_fs_backup: bool = False,
        default_snapshot_move_data: bool = False,
        default_backup_ttl: str = "720h0m0s",
        default_backup_location: str = "default",
        concurrent_backups: int = 1,
    ) -> None:
        self.namespace = namespace
        self.duration = duration
        self.operation_seconds = operation_seconds
        self.volume_snapshotter = volume_snapshotter
        self.failing = failing
        #: How many times the server restarts during an InProgress Backup.
        self.restarts = restarts
        #: The BackupStorageLocations `start` makes (Available; the first is the default).
        self.locations = locations
        self.default_volumes_to_fs_backup = default_volumes_to_fs_backup
        self.default_snapshot_move_data = default_snapshot_move_data
        self.default_backup_ttl = default_backup_ttl
        self.default_backup_location = default_backup_location
        self.concurrent_backups = concurrent_backups
        self._started: set[str] = set()
        #: By Backup uid: its operations (completed and failed, on VolumeSnapshots).
        self._operations: dict[str, JSON] = {}

    def start(self, store: Store) -> None:
        for index, name in enumerate(self.locations):
            if (GROUP, "backupstoragelocations", self.namespace, name) not in store.objects:
                store.put_object(storage_location(name, self.namespace, default=index == 0))

    def react(self, store: Store, change: Change) -> None:
        if (change.group, change.plural) != (GROUP, "backups") or change.type == "DELETED":
            return
        if change.new["metadata"].get("namespace") != self.namespace:
            return
        phase = (change.new.get("status") or {}).get("phase") or "New"
        old_phase = ((change.old or {}).get("status") or {}).get("phase") or "New"
        if phase == "New":
            self._queue(store, change.new)
        elif phase == "Queued" or (old_phase in RUNNING and phase not in RUNNING):
            self._dequeue(store)
        if phase == "ReadyToStart" and change.new["metadata"]["uid"] not in self._started:
            self._started.add(change.new["metadata"]["uid"])
            self._prepare(store, change.new)
        elif phase in ("Finalizing", "FinalizingPartiallyFailed") and old_phase != phase:
            store.later(0, lambda: self._finalize(store, change.new["metadata"]))

    # --- the queue ------------------------------------------------------------------------

    def _backups(self, store: Store) -> list[JSON]:
        mine = (GROUP, "backups", self.namespace)
        return [o for k, o in sorted(store.objects.items()) if k[:3] == mine]

    def _queue(self, store: Store, backup: JSON) -> None:
        queued = [b for b in self._backups(store) if _phase(b) == "Queued"]
        position = max((b["status"].get("queuePosition", 0) for b in queued), default=0) + 1
        status = {"phase": "Queued", "queuePosition": position}
        store.set_status(BACKUPS, self.namespace, backup["metadata"]["name"], status)

    def _namespaces(self, store: Store, spec: JSON) -> set[str]:
        """namespacesForBackup (NamespaceIncludesExcludes.ResolveNamespaceList): the cluster's
        namespaces the Backup includes, less excludes; a name with `*`, `?` or `[` is a glob
        pattern (gobwas/glob) matched against them, an exclude too (globStringSet.match),
        and patterns that match nothing include nothing (ShouldInclude after expansion)."""
        cluster = {k[3] for k in store.objects if k[:2] == ("", "namespaces")}
        included = spec.get("includedNamespaces") or ["*"]
        excluded = spec.get("excludedNamespaces") or []

        def matches(patterns: list[str], namespace: str) -> bool:
            return any(fnmatch.fnmatchcase(namespace, pattern) for pattern in patterns)

        found = cluster if "*" in included else {ns for ns in cluster if matches(included, ns)}
        return {ns for ns in found if not matches(excluded, ns)}

    def _dequeue(self, store: Store) -> None:
        backups = self._backups(store)
        if sum(1 for b in backups if _phase(b) in RUNNING) >= self.concurrent_backups:
            return
        queued = [b for b in backups if _phase(b) == "Queued"]
        queued.sort(key=lambda b: b["status"]["queuePosition"])
        for candidate in queued:
            position = candidate["status"]["queuePosition"]
            earlier = [
                b for b in backups
                if _phase(b) in RUNNING
                or (_phase(b) == "Queued" and b["status"]["queuePosition"] < position)
            ]  # fmt: skip
            mine = self._namespaces(store, candidate.get("spec") or {})
            if any(mine & self._namespaces(store, b.get("spec") or {}) for b in earlier):
                continue
            name = candidate["metadata"]["name"]
            # QueuePosition 0 is omitempty: the merge patch drops the field.
            status = {"phase": "ReadyToStart", "queuePosition": None}
            store.set_status(BACKUPS, self.namespace, name, status)
            rest = [b for b in queued if b is not candidate]
            for number, other in enumerate(rest, start=1):
                if other["status"]["queuePosition"] != number:
                    renumbered = {"queuePosition": number}
                    store.set_status(BACKUPS, self.namespace, other["metadata"]["name"], renumbered)
            return

    # --- the backup controller ---------------------------------------------------------------

    def _location(self, store: Store, spec: JSON) -> tuple[str, bool]:
        """The storage location's name, and whether the server chose it."""
        if spec.get("storageLocation"):
            return spec["storageLocation"], False
        mine = (GROUP, "backupstoragelocations", self.namespace)
        for key, location in sorted(store.objects.items()):
            if key[:3] == mine and (location.get("spec") or {}).get("default"):
                return key[3], True
        return self.default_backup_location, True

    def _validate_location(self, store: Store, name: str, server_chose: bool) -> list[str]:
        location = store.objects.get((GROUP, "backupstoragelocations", self.namespace, name))
        if location is None:
            which = f"the server default {name} does not exist" if server_chose else (
                f"the default {name} was not found"
            )  # fmt: skip
            return [
                "an existing backup storage location was not specified at backup creation time"
                f" and {which}. Please address this issue (see `velero backup-location -h` for"
                " options) and create a new backup. Error: backupstoragelocations.velero.io"
                f' "{name}" not found'
            ]
        errors = []
        if (location.get("spec") or {}).get("accessMode") == "ReadOnly":
            errors.append(
                f"backup can't be created because backup storage location {name} is currently"
                " in read-only mode"
            )
        if (location.get("status") or {}).get("phase") != "Available":
            errors.append(
                f"backup can't be created because BackupStorageLocation {name} is in"
                " Unavailable status."
            )
        return errors

    def _prepare(self, store: Store, backup: JSON) -> None:
        """prepareBackupRequest, then the phase: one patch of labels, spec and status."""
        request = copy.deepcopy(backup)
        spec = request.setdefault("spec", {})
        if not spec.get("ttl") or duration_seconds(spec["ttl"]) == 0:
            spec["ttl"] = self.default_backup_ttl
        spec.setdefault("volumeGroupSnapshotLabelKey", "velero.io/volume-group")
        spec.setdefault("csiSnapshotTimeout", "10m0s")
        spec.setdefault("itemOperationTimeout", "4h0m0s")
        if spec.get("defaultVolumesToRestic") is True:
            spec["defaultVolumesToFsBackup"] = True
        if spec.get("defaultVolumesToFsBackup") is None:
            spec["defaultVolumesToFsBackup"] = self.default_volumes_to_fs_backup
        if spec.get("snapshotMoveData") is None:
            spec["snapshotMoveData"] = self.default_snapshot_move_data
        location, server_chose = self._location(store, spec)
        spec["storageLocation"] = location
        errors = self._validate_location(store, location, server_chose)
        labels = request["metadata"].setdefault("labels", {})
        labels["velero.io/storage-location"] = location
        excluded = [
            k[3] for k, ns in sorted(store.objects.items())
            if k[:2] == ("", "namespaces")
            and (ns["metadata"].get("labels") or {}).get(EXCLUDE_LABEL) == "true"
        ]  # fmt: skip
        if excluded:
            spec["excludedNamespaces"] = [*(spec.get("excludedNamespaces") or []), *excluded]
        for field, resource in (
            ("excludedClusterScopedResources", "volumesnapshotcontents.snapshot.storage.k8s.io"),
            ("excludedNamespaceScopedResources", "volumesnapshots.snapshot.storage.k8s.io"),
        ):
            if resource not in (spec.get(field) or []):
                spec[field] = [*(spec.get(field) or []), resource]
        spec["includedNamespaces"] = spec.get("includedNamespaces") or ["*"]
        errors += [
            f"Invalid included/excluded namespace lists: {error}"
            for error in _namespace_list_errors(
                spec["includedNamespaces"], spec.get("excludedNamespaces") or []
            )
        ]
        if spec.get("orLabelSelectors") is not None and spec.get("labelSelector") is not None:
            errors.append(
                "encountered labelSelector as well as orLabelSelectors in backup spec, only one"
                " can be specified"
            )
        status = request.setdefault("status", {})
        status.update(
            version=1,
            formatVersion="1.1.0",
            expiration=_now(duration_seconds(spec["ttl"])),
        )
        if errors:
            status.update(phase="FailedValidation", validationErrors=errors)
        else:
            status.update(phase="InProgress", startTimestamp=_now())
        store.write(store.served(*BACKUPS), request)
        if errors:
            return
        name, uid = request["metadata"]["name"], request["metadata"]["uid"]
        if self.restarts > 0:
            self.restarts -= 1
            store.later(self.duration / 2, lambda: self._restart(store))
        store.later(self.duration, lambda: self._run(store, name, uid))

    def _restart(self, store: Store) -> None:
        for backup in self._backups(store):
            if _phase(backup) == "InProgress":
                status = {
                    "phase": "Failed",
                    "failureReason": RESTART_REASON,
                    "completionTimestamp": _now(),
                }
                store.set_status(BACKUPS, self.namespace, backup["metadata"]["name"], status)

    # --- runBackup -------------------------------------------------------------------------

    def _claims(self, store: Store, spec: JSON) -> list[JSON]:
        """The Bound PVCs the Backup backs up."""
        namespaces = self._namespaces(store, spec)
        labels = (spec.get("labelSelector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        found = []
        for key, claim in sorted(store.objects.items()):
            if key[:2] != ("", "persistentvolumeclaims") or key[2] not in namespaces:
                continue
            claim_labels = claim["metadata"].get("labels") or {}
            if not label_selector_matches(selector, claim_labels):
                continue
            if claim_labels.get(EXCLUDE_LABEL) == "true":
                continue  # item_backupper.go: "Excluding item because it has label ..."
            if (claim.get("status") or {}).get("phase") == "Bound":
                found.append(claim)
        return found

    def _fs_backed(self, store: Store, claim: JSON, fs_default: bool) -> bool:
        """shouldPerformFSBackupLegacy for a Pod that mounts the claim."""
        ns, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        for key, pod in sorted(store.objects.items()):
            if key[:3] != ("", "pods", ns):
                continue
            annotations = pod["metadata"].get("annotations") or {}
            for volume in (pod.get("spec") or {}).get("volumes") or []:
                if (volume.get("persistentVolumeClaim") or {}).get("claimName") != name:
                    continue
                if fs_default:
                    if volume["name"] not in annotations.get(FS_BACKUP_EXCLUDES, "").split(","):
                        return True
                elif volume["name"] in annotations.get(FS_BACKUP_VOLUMES, "").split(","):
                    return True
        return False

    def _pod_volume_backup(self, store: Store, backup: JSON, claim: JSON) -> None:
        meta = backup["metadata"]
        name = f"{meta['name']}-{claim['metadata']['name']}"
        store.put_object({
            "apiVersion": "velero.io/v1",
            "kind": "PodVolumeBackup",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {
                    "velero.io/backup-name": meta["name"],
                    "velero.io/backup-uid": meta["uid"],
                    "velero.io/pvc-uid": claim["metadata"]["uid"],
                },
            },
            "spec": {"backupStorageLocation": backup["spec"]["storageLocation"]},
            "status": {"phase": "Completed"},
        })  # fmt: skip

    def _run(self, store: Store, name: str, uid: str) -> None:
        backup = store.objects.get((GROUP, "backups", self.namespace, name))
        if backup is None or backup["metadata"]["uid"] != uid or _phase(backup) != "InProgress":
            return  # failed by a restart meanwhile: never resumed
        spec = backup["spec"]
        counts = dict.fromkeys(COUNTS, 0)
        failures = self.failing
        operations = {"volumesnapshots": 0, "failed": 0, "total": 0}
        move = bool(spec.get("snapshotMoveData"))
        for claim in self._claims(store, spec):
            if self._fs_backed(store, claim, bool(spec.get("defaultVolumesToFsBackup"))):
                self._pod_volume_backup(store, backup, claim)
                continue
            if spec.get("snapshotVolumes") is False:
                continue
            volume = store.objects.get(("", "persistentvolumes", "", claim["spec"]["volumeName"]))
            csi = volume is not None and bool((volume.get("spec") or {}).get("csi"))
            failed = failures > 0
            failures -= failed
            if self.volume_snapshotter == "csi" and csi:
                # An asynchronous operation: on a VolumeSnapshot, or a data upload.
                operations["total"] += 1
                operations["failed"] += failed
                operations["volumesnapshots"] += not move and not failed
                counts["csiVolumeSnapshotsAttempted"] += not move
            elif self.volume_snapshotter == "native":
                counts["volumeSnapshotsAttempted"] += 1
                counts["volumeSnapshotsCompleted"] += not failed
                counts["errors"] += failed
            # else: skipped, "no applicable volumesnapshotter found"
        counts["backupItemOperationsAttempted"] = operations["total"]
        self._operations[uid] = operations
        waiting = operations["total"] > 0
        stage = "WaitingForPluginOperations" if waiting else "Finalizing"
        status = {
            "phase": stage + ("PartiallyFailed" if counts["errors"] else ""),
            **{key: value for key, value in counts.items() if value},
        }
        store.set_status(BACKUPS, self.namespace, name, status)
        if waiting:
            store.later(self.operation_seconds, lambda: self._operations_done(store, name, uid))

    def _operations_done(self, store: Store, name: str, uid: str) -> None:
        backup = store.objects.get((GROUP, "backups", self.namespace, name))
        if backup is None or backup["metadata"]["uid"] != uid:
            return
        operations = self._operations[uid]
        failed = operations["failed"]
        status = backup.get("status") or {}
        partially = failed or status["phase"].endswith("PartiallyFailed")
        update: JSON = {
            "phase": "FinalizingPartiallyFailed" if partially else "Finalizing",
            "backupItemOperationsCompleted": operations["total"] - failed or None,
            "backupItemOperationsFailed": failed or None,
            "errors": int(status.get("errors") or 0) + failed or None,
        }
        store.set_status(BACKUPS, self.namespace, name, update)

    def _finalize(self, store: Store, meta: JSON) -> None:
        backup = store.objects.get((GROUP, "backups", self.namespace, meta["name"]))
        if backup is None or backup["metadata"]["uid"] != meta["uid"]:
            return
        phase = _phase(backup)
        if phase not in ("Finalizing", "FinalizingPartiallyFailed"):
            return
        completed = (self._operations.get(meta["uid"]) or {}).get("volumesnapshots", 0)
        status = {
            "phase": "Completed" if phase == "Finalizing" else "PartiallyFailed",
            "completionTimestamp": _now(),
            "csiVolumeSnapshotsCompleted": completed or None,
        }
        store.set_status(BACKUPS, self.namespace, meta["name"], status)


def _phase(backup: JSON) -> str:
    return str((backup.get("status") or {}).get("phase") or "New")


# --- what tests put in the workload cluster ------------------------------------------------


def storage_location(
    name: str,
    namespace: str = "velero",
    *,
    phase: str = "Available",
    default: bool = False,
    access_mode: str = "ReadWrite",
) -> JSON:
    """A BackupStorageLocation as the BSL controller left it (`phase`, and its message)."""
    status: JSON = {"phase": phase, "lastValidationTime": _now()}
    if phase == "Unavailable":
        status["message"] = (
            f'BackupStorageLocation "{name}" is unavailable: rpc error: code = Unknown desc ='
            " RequestError: send request failed"
        )
    return {
        "apiVersion": "velero.io/v1",
        "kind": "BackupStorageLocation",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "provider": "aws",
            "objectStorage": {"bucket": "backups"},
            "default": default,
            "accessMode": access_mode,
        },
        "status": status,
    }


def pod(namespace: str, name: str, claims: dict[str, str], annotations: dict[str, str]) -> JSON:
    """A Pod mounting `claims` (volume name -> PVC), with Velero's annotations."""
    volumes = [
        {"name": volume, "persistentVolumeClaim": {"claimName": claim}}
        for volume, claim in claims.items()
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "app:1"}], "volumes": volumes},
        "status": {"phase": "Running"},
    }


def _namespace_list_errors(includes: list[str], excludes: list[str]) -> list[str]:
    """collections.ValidateNamespaceIncludesExcludes, with wildcard.ValidateNamespaceName and
    validateNamespaceName (the wildcards read as `x`, then a namespace name), in its words."""
    errors = []
    if len(set(includes)) > 1 and "*" in includes:
        errors.append("includes list must either contain '*' only, or a non-empty list of items")
    if "*" in excludes:
        errors.append("excludes list cannot contain '*'")
    errors += [
        f"excludes list cannot contain an item in the includes list: {item}"
        for item in sorted(set(excludes) & set(includes))
    ]
    for item in [*sorted(set(includes)), *sorted(set(excludes))]:
        if not item:
            continue
        if any(char in item for char in "|()!{},"):
            errors.append("wildcard pattern contains unsupported characters: |, (, ), !, {, }, ,")
        elif "**" in item:
            errors.append("wildcard pattern contains consecutive asterisks (only single * allowed)")
        elif _bracket_error(item):
            errors.append(_bracket_error(item))
        else:
            plain = re.sub(r"[*?\[\]]", "x", item)
            if len(plain) > 63 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", plain):
                errors.append(
                    f'invalid namespace "{item}": a lowercase RFC 1123 label must consist of'
                    " lower case alphanumeric characters or '-', and must start and end with an"
                    " alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for"
                    " validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                )
    return errors


def _bracket_error(pattern: str) -> str:
    """wildcard.validateBracePatterns."""
    index = 0
    while index < len(pattern):
        if pattern[index] == "]":
            return "wildcard pattern contains unmatched closing bracket ']'"
        if pattern[index] == "[":
            end = pattern.find("]", index + 1)
            if end < 0:
                return "wildcard pattern contains unclosed bracket '['"
            if end == index + 1:
                return "wildcard pattern contains empty bracket pattern '[]'"
            index = end
        index += 1
    return ""
