"""The state of the Kubernetes API emulator and the rules kube-apiserver applies to it.

`tests.support.kube` serves this store over HTTP and owns the thread and the event loop it
runs in; every method here runs in that loop only, so nothing here locks. The store keeps
objects by group, plural, namespace and name (the versions of a resource share them), gives
each change the next resourceVersion, keeps a bounded history of changes for watches, and
hands each change to the open watches' queues.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import datetime
import json
import secrets
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import yaml

from tests.support.kube_semantics import (
    JSON,
    ApiError,
    field_selector_matches,
    fold_string_data,
    json_patch,
    label_selector_matches,
    merge_patch,
)

#: How many changes the watch history keeps; a watch from before them answers 410.
HISTORY = 5000
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # generateName's alphabet (no vowels, no 0/1/3)
_DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public")


@dataclasses.dataclass(frozen=True)
class Resource:
    """One served resource: group/version/plural, its kind, scope and status subresource."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        # How kube-apiserver names a resource in messages: `secrets`, `clusters.cluster.x-k8s.io`.
        return f"{self.plural}.{self.group}" if self.group else self.plural


BUILTINS: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "Namespace", namespaced=False),
    Resource("", "v1", "secrets", "Secret", namespaced=True, status=False),
    Resource("", "v1", "configmaps", "ConfigMap", namespaced=True, status=False),
    Resource("", "v1", "pods", "Pod", namespaced=True),
    Resource("", "v1", "services", "Service", namespaced=True),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True, status=False),
    Resource("", "v1", "events", "Event", namespaced=True, status=False),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", namespaced=True),
    Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False),
    Resource("apps", "v1", "deployments", "Deployment", namespaced=True),
    Resource("apps", "v1", "statefulsets", "StatefulSet", namespaced=True),
    Resource("apps", "v1", "daemonsets", "DaemonSet", namespaced=True),
    Resource("batch", "v1", "jobs", "Job", namespaced=True),
    *(
        Resource("rbac.authorization.k8s.io", "v1", plural, kind, namespaced, status=False)
        for plural, kind, namespaced in (
            ("clusterroles", "ClusterRole", False),
            ("clusterrolebindings", "ClusterRoleBinding", False),
            ("roles", "Role", True),
            ("rolebindings", "RoleBinding", True),
        )
    ),
    Resource("events.k8s.io", "v1", "events", "Event", namespaced=True, status=False),
    Resource("cluster.x-k8s.io", "v1beta2", "clusters", "Cluster", namespaced=True),
    Resource("cluster.x-k8s.io", "v1beta1", "clusters", "Cluster", namespaced=True),
    Resource("snapshot.storage.k8s.io", "v1", "volumesnapshots", "VolumeSnapshot", True),
    Resource(
        "snapshot.storage.k8s.io", "v1", "volumesnapshotclasses", "VolumeSnapshotClass", False
    ),
    Resource(
        "snapshot.storage.k8s.io", "v1", "volumesnapshotcontents", "VolumeSnapshotContent", False
    ),
    Resource("velero.io", "v1", "backups", "Backup", namespaced=True),
)

# Objects of all versions of a group's resource share a store: (group, plural, namespace, name).
Key = tuple[str, str, str, str]


@dataclasses.dataclass
class Change:
    """One change, kept for watches: the object before (None on create) and after."""

    rv: int
    type: str
    group: str
    plural: str
    old: JSON | None
    new: JSON


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


def _not_found(res: Resource, name: str) -> ApiError:
    return ApiError(
        404,
        f'{res.qualified} "{name}" not found',
        details={"name": name, "group": res.group, "kind": res.plural},
    )


def _success(res: Resource, obj: JSON) -> JSON:
    meta = _meta(obj)
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": meta.get("name"),
            "group": res.group,
            "kind": res.plural,
            "uid": meta.get("uid"),
        },
    }


def _spec_part(obj: JSON) -> JSON:
    # What counts for metadata.generation: everything but metadata and status.
    return {key: value for key, value in obj.items() if key not in ("metadata", "status")}


class Store:
    """Objects, resourceVersions, watch history and the served resources."""

    def __init__(self) -> None:
        self.resources: dict[tuple[str, str, str], Resource] = {}
        self.objects: dict[Key, JSON] = {}
        self.rv = 0
        self.history: collections.deque[Change] = collections.deque(maxlen=HISTORY)
        self.compacted_rv = 0
        self.watchers: set[asyncio.Queue[Change | None]] = set()
        #: Pod logs by (namespace, pod, container); container "" is a pod's only container.
        self.logs: dict[tuple[str, str, str], str] = {}
        self.reset()

    def reset(self) -> None:
        """Only the built-ins, the default namespaces, no watches; resourceVersions go on."""
        self.close_watches()
        self.objects.clear()
        self.history.clear()
        self.compacted_rv = self.rv
        self.logs.clear()
        self.resources = {(r.group, r.version, r.plural): r for r in BUILTINS}
        for name in _DEFAULT_NAMESPACES:
            self.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def pod_log(self, res: Resource, ns: str, name: str, query: Mapping[str, str]) -> str:
        """A container's log (tailLines, limitBytes); a pod of several needs its container named."""
        container = query.get("container", "")
        pod = self.existing(res, ns, name)
        names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
        if not container and len(names) > 1:
            raise ApiError(
                400,
                f"a container name must be specified for pod {name}, "
                f"choose one of: [{' '.join(names)}]",
            )
        if container and container not in names:
            raise ApiError(400, f"container {container} is not valid for pod {name}")
        found = self.logs.get((ns, name, container or (names[0] if names else "")))
        if found is None and len(names) <= 1:
            found = self.logs.get((ns, name, ""))
        text = found or ""
        if tail := query.get("tailLines"):
            text = "".join(text.splitlines(keepends=True)[-int(tail) :])
        if limit := query.get("limitBytes"):
            text = text.encode()[: int(limit)].decode(errors="ignore")
        return text

    def compact(self) -> None:
        self.history.clear()
        self.compacted_rv = self.rv

    def resource_of(self, api_version: str, kind: str) -> Resource:
        group, _, version = api_version.rpartition("/")
        for res in self.resources.values():
            if (res.group, res.version, res.kind) == (group, version, kind):
                return res
        raise LookupError(f"{api_version} {kind} is not declared; declare() it first")

    def served(self, group: str, version: str, plural: str) -> Resource:
        res = self.resources.get((group, version, plural))
        if res is None:
            raise ApiError(404, "the server could not find the requested resource")
        return res

    def present(self, res: Resource, obj: JSON) -> JSON:
        out = copy.deepcopy(obj)
        out["apiVersion"], out["kind"] = res.api_version, res.kind
        return out

    def _commit(self, res: Resource, key: Key, old: JSON | None, new: JSON, kind: str) -> JSON:
        """Give `new` the next resourceVersion, store it (or drop it) and tell watchers."""
        self.rv += 1
        _meta(new)["resourceVersion"] = str(self.rv)
        if kind == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = new
        change = Change(self.rv, kind, res.group, res.plural, old, copy.deepcopy(new))
        if len(self.history) == self.history.maxlen:
            self.compacted_rv = self.history[0].rv
        self.history.append(change)
        for queue in self.watchers:
            queue.put_nowait(change)
        return new

    def _update(self, res: Resource, key: Key, old: JSON, new: JSON) -> JSON:
        """Store a changed object: no-op writes keep their rv; released deletions complete."""
        new_meta, old_meta = _meta(new), _meta(old)
        for field in ("uid", "creationTimestamp", "name", "namespace", "deletionTimestamp"):
            if field in old_meta:
                new_meta[field] = old_meta[field]
        new_meta["generation"] = old_meta.get("generation", 1) + (
            _spec_part(new) != _spec_part(old)
        )
        if res.kind == "Secret":
            fold_string_data(new)
        new_meta["resourceVersion"] = old_meta.get("resourceVersion")
        if new == old:
            return new
        if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
            return self._remove(res, key, new)
        return self._commit(res, key, old, new, "MODIFIED")

    def _remove(self, res: Resource, key: Key, obj: JSON) -> JSON:
        gone = self._commit(res, key, copy.deepcopy(obj), obj, "DELETED")
        if res.plural == "namespaces" and not res.group:
            # No Terminating phase: a Namespace takes its objects with it at once.
            name = key[3]
            for other in [k for k in self.objects if k[2] == name]:
                group, plural = other[0], other[1]
                owner = next(
                    r for r in self.resources.values() if (r.group, r.plural) == (group, plural)
                )
                self._commit(owner, other, self.objects[other], self.objects[other], "DELETED")
        return gone

    def _admit(self, res: Resource, namespace: str, obj: JSON) -> tuple[Key, JSON]:
        """Fill what kube-apiserver fills on create; the object gets its rv when committed."""
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        meta = _meta(obj)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(
                    422, "metadata.name: Required value: name or generateName is required"
                )
            suffix = "".join(secrets.choice(_NAME_CHARS) for _ in range(5))
            meta["name"] = meta["generateName"] + suffix
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent"
                    " on the request",
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta.setdefault("generation", 1)
        if res.kind == "Secret":
            fold_string_data(obj)
        return (res.group, res.plural, namespace if res.namespaced else "", meta["name"]), obj

    def put_object(self, obj: JSON) -> JSON:
        res = self.resource_of(obj.get("apiVersion", ""), obj.get("kind", ""))
        key, obj = self._admit(res, _meta(obj).get("namespace") or "", obj)
        old = self.objects.get(key)
        if old is not None:
            for field in ("uid", "creationTimestamp"):
                _meta(obj)[field] = _meta(old)[field]
            return self.present(res, self._commit(res, key, old, obj, "MODIFIED"))
        return self.present(res, self._commit(res, key, None, obj, "ADDED"))

    def get_object(self, group: str, version: str, plural: str, ns: str, name: str) -> JSON | None:
        res = self.served(group, version, plural)
        obj = self.objects.get((group, plural, ns, name))
        return None if obj is None else self.present(res, obj)

    def list_objects(
        self, group: str, version: str, plural: str, namespace: str | None
    ) -> list[JSON]:
        res = self.served(group, version, plural)
        return [
            self.present(res, obj)
            for key, obj in sorted(self.objects.items())
            if key[:2] == (group, plural) and namespace in (None, key[2])
        ]

    def delete_object(self, group: str, version: str, plural: str, ns: str, name: str) -> None:
        res = self.served(group, version, plural)
        key = (group, plural, ns, name)
        if key not in self.objects:
            raise _not_found(res, name)
        self._remove(res, key, copy.deepcopy(self.objects[key]))

    def set_status(self, resource: tuple[str, str, str], ns: str, name: str, status: JSON) -> JSON:
        res = self.served(*resource)
        key = (res.group, res.plural, ns, name)
        old = self.objects.get(key)
        if old is None:
            raise _not_found(res, name)
        new = copy.deepcopy(old)
        new["status"] = merge_patch(old.get("status") or {}, status)
        return self.present(res, self._commit(res, key, old, new, "MODIFIED"))

    def close_watches(self) -> None:
        for queue in self.watchers:
            queue.put_nowait(None)
        self.watchers.clear()

    def existing(self, res: Resource, ns: str, name: str) -> JSON:
        obj = self.objects.get((res.group, res.plural, ns, name))
        if obj is None:
            raise _not_found(res, name)
        return obj

    def create(self, res: Resource, ns: str, obj: JSON) -> JSON:
        key, obj = self._admit(res, ns, obj)
        if res.namespaced and ("", "namespaces", "", ns) not in self.objects:
            raise ApiError(
                404, f'namespaces "{ns}" not found', details={"name": ns, "kind": "namespaces"}
            )
        if key in self.objects:
            name = key[3]
            raise ApiError(
                409,
                f'{res.qualified} "{name}" already exists',
                reason="AlreadyExists",
                details={"name": name, "group": res.group, "kind": res.plural},
            )
        if res.status:
            # Status belongs to controllers: create resets it, as kube-apiserver does.
            obj.pop("status", None)
        if res.kind == "Namespace" and not res.group:
            obj["status"] = {"phase": "Active"}
        return self.present(res, self._commit(res, key, None, obj, "ADDED"))

    def _check_version(self, res: Resource, old: JSON, new: JSON) -> None:
        wanted = _meta(new).get("resourceVersion")
        if wanted not in (None, "", _meta(old).get("resourceVersion")):
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on {res.qualified} "{_meta(old)["name"]}": the'
                " object has been modified; please apply your changes to the latest version"
                " and try again",
                reason="Conflict",
                details={"name": _meta(old)["name"], "group": res.group, "kind": res.plural},
            )

    def _isolate(self, res: Resource, old: JSON, new: JSON, status_only: bool) -> JSON:
        """The main endpoint cannot change status, and /status changes nothing else."""
        if status_only:
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status")
            return merged
        if res.status:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        return new

    def replace(self, res: Resource, ns: str, name: str, obj: JSON, status_only: bool) -> JSON:
        old = self.existing(res, ns, name)
        if _meta(obj).get("name") not in (None, name):
            raise ApiError(400, "the name of the object does not match the name on the URL")
        self._check_version(res, old, obj)
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        new = self._isolate(res, old, obj, status_only)
        key = (res.group, res.plural, ns, name)
        return self.present(res, self._update(res, key, old, new))

    def patch(
        self,
        res: Resource,
        ns: str,
        name: str,
        *,
        status_only: bool,
        content_type: str,
        raw: bytes,
        field_manager: str,
    ) -> tuple[JSON, int]:
        """The patched object and 200, or 201 when an apply patch created it."""
        kind = content_type
        try:
            body = (
                yaml.safe_load(raw) if kind == "application/apply-patch+yaml" else json.loads(raw)
            )
        except (ValueError, yaml.YAMLError):
            raise ApiError(400, f"the body is not valid {kind}") from None
        key = (res.group, res.plural, ns, name)
        old = self.objects.get(key)
        if kind == "application/apply-patch+yaml":
            if not field_manager:
                raise ApiError(422, "fieldManager: Required value: is required for apply patch")
            if not isinstance(body, dict):
                raise ApiError(400, "an apply patch must be an object")
            if _meta(body).get("name") not in (None, name):
                raise ApiError(400, "the name of the object does not match the name on the URL")
            if old is None and not status_only:
                _meta(body)["name"] = name
                return self.create(res, ns, body), 201
        if old is None:
            raise _not_found(res, name)
        if kind in (
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",  # lists replaced, not merged: a known gap
            "application/apply-patch+yaml",
        ):
            new = merge_patch(old, body)
        elif kind == "application/json-patch+json":
            new = json_patch(old, body)
        else:
            raise ApiError(415, f"the body of the request was in an unknown format: {kind}")
        self._check_version(res, old, new)
        new = self._isolate(res, old, new, status_only)
        return self.present(res, self._update(res, key, old, new)), 200

    def delete(self, res: Resource, ns: str, name: str) -> JSON:
        key = (res.group, res.plural, ns, name)
        old = self.existing(res, ns, name)
        if _meta(old).get("finalizers"):
            # Finalizers hold the object, marked, until someone removes them.
            new = copy.deepcopy(old)
            _meta(new).setdefault("deletionTimestamp", _now())
            return self.present(res, self._update(res, key, old, new))
        self._remove(res, key, copy.deepcopy(old))
        return _success(res, old)

    def matcher(self, ns: str, query: Any) -> Callable[[JSON], bool]:
        labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
        # Parse once now, so a bad selector answers 400 before anything streams.
        label_selector_matches(labels, {})
        field_selector_matches(fields, {})

        def matches(obj: JSON) -> bool:
            meta = _meta(obj)
            return (
                ns in ("", meta.get("namespace"))
                and label_selector_matches(labels, meta.get("labels") or {})
                and field_selector_matches(fields, obj)
            )

        return matches

    def list_answer(self, res: Resource, ns: str, query: Any) -> JSON:
        matches = self.matcher(ns, query)
        items = [
            self.present(res, obj)
            for key, obj in sorted(self.objects.items())
            if key[:2] == (res.group, res.plural) and matches(obj)
        ]
        return {
            "apiVersion": res.api_version,
            "kind": f"{res.kind}List",
            "metadata": {"resourceVersion": str(self.rv)},
            "items": items,
        }

    def backlog(self, res: Resource, since: str, matches: Callable[[JSON], bool]) -> Iterator[JSON]:
        """What a new watch sends first: current objects, or the changes after `since`."""
        if since in ("", "0"):
            for key, obj in sorted(self.objects.items()):
                if key[:2] == (res.group, res.plural) and matches(obj):
                    yield {"type": "ADDED", "object": self.present(res, obj)}
            return
        if not since.isdigit():
            raise ApiError(400, f"invalid resourceVersion {since!r}")
        if int(since) < self.compacted_rv:
            gone = ApiError(410, f"too old resource version: {since} ({self.compacted_rv})")
            yield {"type": "ERROR", "object": gone.status()}
            return
        for change in self.history:
            if change.rv > int(since):
                yield from self.event(res, change, matches)

    def event(
        self, res: Resource, change: Change, matches: Callable[[JSON], bool]
    ) -> Iterator[JSON]:
        # A change that moves an object into or out of a watch's selection is, for that
        # watch, an ADDED or DELETED, as kube-apiserver reports it.
        if (change.group, change.plural) != (res.group, res.plural):
            return
        was = change.old is not None and matches(change.old)
        now = matches(change.new)
        if change.type == "DELETED":
            kind = "DELETED" if was else None
        elif was and now:
            kind = change.type
        else:
            kind = "ADDED" if now else ("DELETED" if was else None)
        if kind is not None:
            yield {"type": kind, "object": self.present(res, change.new)}

    def discovery(self, parts: list[str]) -> JSON:
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        groups: dict[str, list[str]] = {}
        for group, version, _ in self.resources:
            if group and version not in groups.setdefault(group, []):
                groups[group].append(version)

        def describe(group: str) -> JSON:
            versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in groups[group]]
            return {"name": group, "versions": versions, "preferredVersion": versions[0]}

        if parts == ["apis"]:
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [describe(g) for g in groups],
            }
        if len(parts) == 2 and parts[0] == "apis":
            if parts[1] not in groups:
                raise ApiError(404, "the server could not find the requested resource")
            return {"kind": "APIGroup", "apiVersion": "v1", **describe(parts[1])}
        group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
        served = [r for r in self.resources.values() if (r.group, r.version) == (group, version)]
        if not served:
            raise ApiError(404, "the server could not find the requested resource")
        resources: list[JSON] = []
        for res in served:
            verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
            entry = {"name": res.plural, "singularName": res.kind.lower(), "kind": res.kind}
            resources.append({**entry, "namespaced": res.namespaced, "verbs": verbs})
            if res.status:
                status_verbs = ["get", "patch", "update"]
                resources.append(
                    {
                        **entry,
                        "name": f"{res.plural}/status",
                        "verbs": status_verbs,
                        "namespaced": res.namespaced,
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }
