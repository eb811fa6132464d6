"""`backup_pvs`: back up a workload cluster's persistent volumes, with CSI snapshots or Velero.

`backend: csi` makes a `snapshot.storage.k8s.io/v1` VolumeSnapshot per Bound CSI volume
(`workflows.steps.csi_snapshots`) and is done when every one is `readyToUse`.
`backend: velero` makes one `velero.io/v1` Backup in Velero's namespace, and another when
Velero drops it or its storage location was unavailable (`workflows.steps.velero_backups`),
and is done when it is `Completed` with the volumes it covers backed up, as Velero wrote
the Backup (`workflows.steps.velero_volumes`). Both run in the workload cluster.

Before a deletion a snapshot must outlive the cluster: a VolumeSnapshotClass whose
deletionPolicy is `Delete` removes the storage snapshot together with the VolumeSnapshot,
that is with the cluster. So on BeforeClusterDelete every class the csi backend uses must
have deletionPolicy `Retain` (checked when the step runs, before any snapshot is made);
Velero, which keeps backups outside the cluster, is the recommended backend.
"""

from __future__ import annotations

from typing import Any

from workflows.steps import csi_snapshots, namespace_patterns, objects, registry, velero_backups


def _check(params: dict[str, Any], hook: str) -> None:
    velero_only = (
        "ttl", "snapshotVolumes", "allowPartiallyFailed", "storageLocation",
        "defaultVolumesToFsBackup", "snapshotMoveData", "backupAttempts",
    )  # fmt: skip
    csi_only = ("volumeSnapshotClassName", "volumeSnapshotClasses")
    for name in velero_only if params["backend"] == "csi" else csi_only:
        if name in params and params[name] != PARAMS[name].default:
            raise registry.ParamError(name, f"applies to backend {_other(params)} only")


def _check_namespaces(value: list[Any]) -> list[str]:
    """Names and patterns Velero accepts (collections.ValidateNamespaceIncludesExcludes)."""
    names = objects.check_strings(value)
    for index, name in enumerate(names):
        why = namespace_patterns.problem(name)
        if why:
            raise registry.ParamError("", f"item {index}, {why}")
    if "*" in names and len(set(names)) > 1:
        raise registry.ParamError("", "'*' (every namespace) must be the only item")
    return names


def _other(params: dict[str, Any]) -> str:
    return "velero" if params["backend"] == "csi" else "csi"


PARAMS = {
    "backend": registry.Param(str, default="csi", choices=("csi", "velero")),
    #: The namespaces whose PVCs (csi) or resources (velero) are backed up; none: all. A
    #: name with `*`, `?` or `[...]` is a pattern Velero expands against the live namespaces
    #: (`app-*`); the csi backend reads it the same way.
    "namespaces": registry.Param(list, default=[], check=_check_namespaces, items=objects.STRING),
    #: Labels a PVC (csi) or resource (velero) must carry.
    "labelSelector": registry.Param(
        dict, default={}, check=objects.check_string_map, values=objects.STRING
    ),
    #: csi: the class for the volumes of its own CSI driver.
    "volumeSnapshotClassName": registry.Param(str),
    #: csi: CSI driver -> VolumeSnapshotClass; a driver not named uses its default class.
    "volumeSnapshotClasses": registry.Param(
        dict, check=objects.check_string_map, values=objects.STRING
    ),
    "veleroNamespace": registry.Param(str, default="velero"),
    "storageLocation": registry.Param(str),
    "snapshotVolumes": registry.Param(bool, default=True),
    "ttl": registry.Param(str, default="720h0m0s"),
    "allowPartiallyFailed": registry.Param(bool, default=False),
    #: velero: back up mounted volumes with Velero's file system backup (unset: the
    #: server's `--default-volumes-to-fs-backup`).
    "defaultVolumesToFsBackup": registry.Param(bool),
    #: velero: move CSI snapshot data to the backup storage (Velero's data mover; unset: the
    #: server's `--default-snapshot-move-data`).
    "snapshotMoveData": registry.Param(bool),
    #: velero: Backups started in all when one ends Failed (a Velero restart fails it), or
    #: fails validation because its storage location is unavailable.
    "backupAttempts": registry.Param(int, default=3, minimum=1),
    "pollSeconds": registry.Param((int, float), default=10, minimum=1),
}


#: A snapshot controller retries an error until the step's timeout, this one by default.
DEFAULT_TIMEOUT_SECONDS = 4 * 3600


@registry.step_type(
    "backup_pvs",
    params=PARAMS,
    check=_check,
    default_timeout_seconds=DEFAULT_TIMEOUT_SECONDS,
    # A snapshot or a Velero backup reports its phase; a large volume stays in one a while.
    stall_seconds=1800,
)
def backup_pvs(ctx: registry.StepContext) -> registry.Outcome:
    """Backs up persistent volumes with CSI snapshots or a Velero backup."""
    api = objects.workload(ctx)
    if ctx.params["backend"] == "velero":
        return velero_backups.run(ctx, api)
    return csi_snapshots.run(ctx, api)
