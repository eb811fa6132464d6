"""CSI snapshots in the Kubernetes API emulator: external-snapshotter's two controllers.

`SnapshotController` (switched on by a test: `kube.add_controller(...)`) plays the
snapshot-controller and the csi-snapshotter sidecar of kubernetes-csi/external-snapshotter
(pkg/common-controller/snapshot_controller.go, pkg/sidecar-controller/
snapshot_controller.go; master at afb2f0d8, 2026-08-21, after v8.6.0) for dynamically
provisioned snapshots:

- A VolumeSnapshot's source PVC must be Bound to a PersistentVolume whose volume is CSI
  (`getVolumeFromVolumeSnapshot`, `pvDriverFromSnapshot`); without a class it gets the
  default class of that driver (`SetDefaultSnapshotClass`: annotation
  `snapshot.storage.kubernetes.io/is-default-class`, exactly one per driver). Each failure
  is written to the snapshot's `status.error`, and tried again.
- A VolumeSnapshotContent `snapcontent-<snapshot uid>` binds to it, with the class's
  driver and deletionPolicy; the snapshot gets `boundVolumeSnapshotContentName` and the
  bound-protection finalizer.
- The sidecar's CreateSnapshot fails `failures` times and is retried after
  `retry_seconds`: its error goes on the content's `status.error` (readyToUse false), which
  the common controller copies to the snapshot (updateSnapshotStatus; the real one at its
  next sync of the snapshot, a resync every 15 minutes by default, since
  needsUpdateSnapshotStatus does not compare errors: here at once). The first failure
  says "Failed to create snapshot: ..." (createSnapshot, the content has no status yet), the
  next ones "Failed to check and update snapshot content: ..." (checkandUpdateContentStatus);
  an error already there is not written again (updateContentErrorStatusWithEvent). Then it
  succeeds: `snapshotHandle`, `creationTime` (the cut), `restoreSize` (the PV's capacity),
  and readyToUse `ready_after` seconds later, as a driver that uploads the snapshot reports
  it. The error is cleared only when readyToUse turns true (sidecar
  updateSnapshotContentStatus, common updateSnapshotStatus), not at the cut, whatever
  client/apis/volumesnapshot/v1/types.go says ("Upon success, this error field will be
  cleared").
- A deleted VolumeSnapshot loses its finalizer; its content goes with it when its
  deletionPolicy is Delete, and stays when Retain.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import re
import time

from tests.support import kube_lifecycle
from tests.support.kube_semantics import JSON
from tests.support.kube_store import Change, Store

GROUP = "snapshot.storage.k8s.io"
SNAPSHOTS = (GROUP, "v1", "volumesnapshots")
CONTENTS = (GROUP, "v1", "volumesnapshotcontents")
DEFAULT_CLASS = "snapshot.storage.kubernetes.io/is-default-class"
BOUND_PROTECTION = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
_UNITS = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def size_bytes(quantity: str) -> int:
    """Bytes of a binary-suffixed quantity ("1Gi", "512Mi", "1024")."""
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|)", quantity)
    if match is None:
        raise ValueError(f"unsupported quantity {quantity!r}")
    return int(match[1]) * _UNITS[match[2]]


def quantity(size: int) -> str:
    """A byte count as the largest exact binary suffix (resource.NewQuantity(BinarySI))."""
    for suffix in ("Ti", "Gi", "Mi", "Ki"):
        if size and size % _UNITS[suffix] == 0:
            return f"{size // _UNITS[suffix]}{suffix}"
    return str(size)


class SnapshotController:
    """external-snapshotter's snapshot-controller and csi-snapshotter, scripted."""

    def __init__(
        self,
        *,
        failures: int = 0,
        error: str = "rpc error: code = Internal desc = snapshot quota exceeded",
        retry_seconds: float = 0.2,
        ready_after: float = 0.0,
    ) -> None:
        #: How many CreateSnapshot calls fail for each content before one succeeds.
        self.failures = failures
        self.error = error
        self.retry_seconds = retry_seconds
        #: Seconds between the snapshot cut (a handle) and readyToUse (the upload done).
        self.ready_after = ready_after
        self._attempts: dict[str, int] = {}
        self._retrying: set[str] = set()

    def start(self, store: Store) -> None:
        """Started late (after an outage, say): looks at the VolumeSnapshots already there."""
        for key, snapshot in list(store.objects.items()):
            if key[:2] == (GROUP, "volumesnapshots"):
                self.react(store, Change(0, "ADDED", GROUP, "volumesnapshots", None, snapshot))

    def react(self, store: Store, change: Change) -> None:
        if (change.group, change.plural) != (GROUP, "volumesnapshots") or change.type == "DELETED":
            return
        meta = change.new["metadata"]
        key = (GROUP, "volumesnapshots", meta["namespace"], meta["name"])
        snapshot = store.objects.get(key)
        if snapshot is None:
            return
        if snapshot["metadata"].get("deletionTimestamp"):
            self._release(store, snapshot)
        elif not (snapshot.get("status") or {}).get("boundVolumeSnapshotContentName"):
            self._bind(store, snapshot)

    # --- the common controller ----------------------------------------------------------

    def _fail(self, store: Store, snapshot: JSON, message: str) -> None:
        meta = snapshot["metadata"]
        error = {"time": _now(), "message": message}
        current = (snapshot.get("status") or {}).get("error") or {}
        if current.get("message") != message:
            store.set_status(
                SNAPSHOTS, meta["namespace"], meta["name"], {"readyToUse": False, "error": error}
            )

        if meta["uid"] in self._retrying:
            return

        def again() -> None:
            self._retrying.discard(meta["uid"])
            current = store.objects.get((GROUP, "volumesnapshots", meta["namespace"], meta["name"]))
            if current is not None and current["metadata"]["uid"] == meta["uid"]:
                self.react(store, Change(0, "MODIFIED", GROUP, "volumesnapshots", None, current))

        self._retrying.add(meta["uid"])
        store.later(self.retry_seconds, again)

    def _volume(self, store: Store, snapshot: JSON) -> JSON | str:
        """The source's PersistentVolume, or why there is none to snapshot."""
        ns = snapshot["metadata"]["namespace"]
        claim_name = ((snapshot.get("spec") or {}).get("source") or {}).get(
            "persistentVolumeClaimName", ""
        )
        claim = store.objects.get(("", "persistentvolumeclaims", ns, claim_name))
        if claim is None:
            return f'failed to retrieve PVC {claim_name} from the lister: "not found"'
        if (claim.get("status") or {}).get("phase") != "Bound":
            return (
                f"the PVC {claim_name} is not yet bound to a PV, will not attempt to take a"
                " snapshot"
            )
        volume_name = (claim.get("spec") or {}).get("volumeName", "")
        volume = store.objects.get(("", "persistentvolumes", "", volume_name))
        if volume is None:
            return f"failed to retrieve PV {volume_name} from the API server"
        if not (volume.get("spec") or {}).get("csi"):
            name = snapshot["metadata"]["name"]
            return f"snapshotting non-CSI volumes is not supported, snapshot:{ns}/{name}"
        return volume

    def _class(self, store: Store, snapshot: JSON, driver: str) -> JSON | str:
        name = (snapshot.get("spec") or {}).get("volumeSnapshotClassName")
        classes = [o for k, o in store.objects.items() if k[:2] == (GROUP, "volumesnapshotclasses")]
        if name:
            found = next((c for c in classes if c["metadata"]["name"] == name), None)
            return (
                found
                if found is not None
                else f'volumesnapshotclass.snapshot.storage.k8s.io "{name}" not found'
            )
        defaults = [
            c for c in classes
            if (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS) == "true"
            and c.get("driver") == driver
        ]  # fmt: skip
        if not defaults:
            return "cannot find default snapshot class"
        if len(defaults) > 1:
            return f"{len(defaults)} default snapshot classes were found"
        # SetDefaultSnapshotClass writes the class into the snapshot's spec.
        patched = copy.deepcopy(snapshot)
        patched["spec"]["volumeSnapshotClassName"] = defaults[0]["metadata"]["name"]
        store.write(store.served(*SNAPSHOTS), patched)
        return defaults[0]

    def _bind(self, store: Store, snapshot: JSON) -> None:
        volume = self._volume(store, snapshot)
        if isinstance(volume, str):
            self._fail(store, snapshot, f"Failed to create snapshot content with error {volume}")
            return
        driver = volume["spec"]["csi"]["driver"]
        snapshot_class = self._class(store, snapshot, driver)
        if isinstance(snapshot_class, str):
            self._fail(
                store, snapshot, f"Failed to create snapshot content with error {snapshot_class}"
            )
            return
        meta = snapshot["metadata"]
        content_name = f"snapcontent-{meta['uid']}"
        content = {
            "apiVersion": f"{GROUP}/v1",
            "kind": "VolumeSnapshotContent",
            "metadata": {"name": content_name},
            "spec": {
                "volumeSnapshotRef": {
                    "apiVersion": f"{GROUP}/v1",
                    "kind": "VolumeSnapshot",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
                "deletionPolicy": snapshot_class.get("deletionPolicy", "Delete"),
                "driver": driver,
                "volumeSnapshotClassName": snapshot_class["metadata"]["name"],
                "source": {"volumeHandle": volume["spec"]["csi"]["volumeHandle"]},
            },
        }
        if (GROUP, "volumesnapshotcontents", "", content_name) not in store.objects:
            store.create(store.served(*CONTENTS), "", content)
        current = store.objects[(GROUP, "volumesnapshots", meta["namespace"], meta["name"])]
        held = copy.deepcopy(current)
        finalizers = held["metadata"].setdefault("finalizers", [])
        if BOUND_PROTECTION not in finalizers:
            finalizers.append(BOUND_PROTECTION)
            store.write(store.served(*SNAPSHOTS), held)
        store.set_status(
            SNAPSHOTS, meta["namespace"], meta["name"],
            {"boundVolumeSnapshotContentName": content_name, "readyToUse": False},
        )  # fmt: skip
        size = size_bytes(((volume.get("spec") or {}).get("capacity") or {}).get("storage", "0"))
        store.later(0, lambda: self._create_snapshot(store, content_name, size))

    # --- the sidecar ------------------------------------------------------------------------

    def _create_snapshot(self, store: Store, content_name: str, size: int) -> None:
        content = store.objects.get((GROUP, "volumesnapshotcontents", "", content_name))
        if content is None:
            return
        spec = content["spec"]
        ref = spec["volumeSnapshotRef"]
        attempt = self._attempts.get(content_name, 0)
        self._attempts[content_name] = attempt + 1
        if attempt < self.failures:
            where = "create snapshot" if attempt == 0 else "check and update snapshot content"
            message = (
                f"Failed to {where}: failed to take snapshot of the volume"
                f' {spec["source"]["volumeHandle"]}: "{self.error}"'
            )
            current = (content.get("status") or {}).get("error") or {}
            if current.get("message") != message:
                error = {"time": _now(), "message": message}
                store.set_status(CONTENTS, "", content_name, {"readyToUse": False, "error": error})
                store.set_status(SNAPSHOTS, ref["namespace"], ref["name"], {"error": error})
            store.later(
                self.retry_seconds, lambda: self._create_snapshot(store, content_name, size)
            )
            return
        handle = "snap-" + hashlib.sha256(content_name.encode()).hexdigest()[:16]
        ready = self.ready_after <= 0
        # The error goes only with readyToUse turning true: a cut snapshot keeps it.
        cleared = {"error": None} if ready else {}
        store.set_status(
            CONTENTS, "", content_name,
            {"snapshotHandle": handle, "creationTime": time.time_ns(), "restoreSize": size,
             "readyToUse": ready, **cleared},
        )  # fmt: skip
        store.set_status(
            SNAPSHOTS, ref["namespace"], ref["name"],
            {"creationTime": _now(), "readyToUse": ready, "restoreSize": quantity(size),
             **cleared},
        )  # fmt: skip
        if not ready:

            def uploaded() -> None:
                if (GROUP, "volumesnapshotcontents", "", content_name) in store.objects:
                    done = {"readyToUse": True, "error": None}
                    store.set_status(CONTENTS, "", content_name, done)
                    store.set_status(SNAPSHOTS, ref["namespace"], ref["name"], done)

            store.later(self.ready_after, uploaded)

    def _release(self, store: Store, snapshot: JSON) -> None:
        meta = snapshot["metadata"]
        content_name = (snapshot.get("status") or {}).get("boundVolumeSnapshotContentName")
        content = store.objects.get((GROUP, "volumesnapshotcontents", "", content_name or ""))
        if content is not None and content["spec"].get("deletionPolicy") == "Delete":
            kube_lifecycle.delete(store, store.served(*CONTENTS), "", content_name or "")
        if BOUND_PROTECTION in (meta.get("finalizers") or []):
            released = copy.deepcopy(snapshot)
            released["metadata"]["finalizers"] = [
                f for f in meta["finalizers"] if f != BOUND_PROTECTION
            ]
            store.write(store.served(*SNAPSHOTS), released)


# --- what tests put in the workload cluster ------------------------------------------------


def volume(
    namespace: str,
    name: str,
    *,
    driver: str | None = "csi.example.com",
    size: str = "1Gi",
    bound: bool = True,
    labels: dict[str, str] | None = None,
) -> list[JSON]:
    """A PVC and, when bound, its PersistentVolume (CSI unless `driver` is None)."""
    claim: JSON = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
        "status": {"phase": "Pending"},
    }
    if not bound:
        return [claim]
    pv_name = f"pvc-{namespace}-{name}"
    source: JSON = (
        {"csi": {"driver": driver, "volumeHandle": f"vol-{namespace}-{name}"}}
        if driver
        else {"hostPath": {"path": f"/data/{name}"}}
    )
    claim["spec"]["volumeName"] = pv_name
    claim["status"] = {"phase": "Bound", "capacity": {"storage": size}}
    pv: JSON = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name},
        "spec": {
            "capacity": {"storage": size},
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": namespace, "name": name},
            **source,
        },
        "status": {"phase": "Bound"},
    }
    return [claim, pv]


def snapshot_class(name: str, driver: str, policy: str, *, default: bool = False) -> JSON:
    annotations = {DEFAULT_CLASS: "true"} if default else {}
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "VolumeSnapshotClass",
        "metadata": {"name": name, "annotations": annotations},
        "driver": driver,
        "deletionPolicy": policy,
    }
