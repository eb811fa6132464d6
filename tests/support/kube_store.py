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
from collections.abc import Callable, Sequence
from typing import Protocol

import yaml

from tests.support.kube_resources import BUILTINS, Resource
from tests.support.kube_semantics import (
    JSON,
    ApiError,
    fold_string_data,
    json_patch,
    merge_patch,
    validate,
)

#: How many changes the watch history keeps; a watch from before them answers 410.
HISTORY = 5000
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # generateName's alphabet (no vowels, no 0/1/3)
_DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public")


# Objects of all versions of a group's resource share a store: (group, plural, namespace, name).
Key = tuple[str, str, str, str]

CRD_GROUP = "apiextensions.k8s.io"
CRDS = (CRD_GROUP, "customresourcedefinitions")
NAMESPACES = ("", "namespaces")
PODS = ("", "pods")
#: The Namespace finalizer the namespace controller removes once the content is gone.
NAMESPACE_FINALIZER = "kubernetes"


@dataclasses.dataclass
class Change:
    """One change, kept for watches: the object before (None on create) and after."""

    rv: int
    type: str
    group: str
    plural: str
    old: JSON | None
    new: JSON


class Controller(Protocol):
    """A controller a test switches on: it sees every committed change, in the server's loop,
    and acts through the store's methods as the real controller acts through the API."""

    def react(self, store: Store, change: Change) -> None: ...


class Admission(Protocol):
    """An admission plugin, switched on like a controller (`KubeEmulator.add_controller`):
    it sees each create before it is stored, after NamespaceLifecycle, and may change the
    object or refuse it with an `ApiError`, as kube-apiserver's admission chain does.
    `shown` is the name its errors quote: the generateName while no name is generated yet
    (apiserver pkg/admission/errors.go, `extractResourceName`)."""

    def admit(self, store: Store, res: Resource, namespace: str, obj: JSON, shown: str) -> None: ...


class SystemController(Controller, Protocol):
    """A controller every cluster runs (namespaces, garbage collection, CRDs): never switched
    off, only reset to its defaults with the store."""

    def reset(self) -> None: ...


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


def condition_true(obj: JSON, kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def held(res: Resource, obj: JSON) -> bool:
    """True while finalizers keep a deleted object (a Namespace's spec ones too), or while
    a deleted Pod's grace period runs (its kubelet ends it: `kube_lifecycle.delete`)."""
    if _meta(obj).get("finalizers"):
        return True
    if (res.group, res.plural) == PODS and _meta(obj).get("deletionGracePeriodSeconds"):
        return True
    return (res.group, res.plural) == NAMESPACES and bool((obj.get("spec") or {}).get("finalizers"))


def _spec_part(obj: JSON) -> JSON:
    # What counts for metadata.generation: everything but metadata and status.
    return {key: value for key, value in obj.items() if key not in ("metadata", "status")}


class Store:
    """Objects, resourceVersions, watch history and the served resources."""

    def __init__(self, system: Sequence[SystemController] = ()) -> None:
        #: What kube-controller-manager and apiextensions-apiserver run (`kube_lifecycle`,
        #: `kube_crds`): they see every change, like the controllers tests switch on.
        self.system = list(system)
        self.resources: dict[tuple[str, str, str], Resource] = {}
        self.objects: dict[Key, JSON] = {}
        self.rv = 0
        self.history: collections.deque[Change] = collections.deque(maxlen=HISTORY)
        self.compacted_rv = 0
        self.watchers: set[asyncio.Queue[Change | None]] = set()
        #: Pod logs by (namespace, pod, container); container "" is a pod's only container.
        self.logs: dict[tuple[str, str, str], str] = {}
        #: Controllers a test switched on (`KubeEmulator.add_controller`); reset drops them.
        self.controllers: list[Controller] = []
        self._timers: list[asyncio.TimerHandle] = []
        self.reset()

    def reset(self) -> None:
        """Only the built-ins, the default namespaces, no watches; resourceVersions go on."""
        self.close_watches()
        self.controllers.clear()
        for system in self.system:
            system.reset()
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        self.objects.clear()
        self.history.clear()
        self.compacted_rv = self.rv
        self.logs.clear()
        self.resources = {(r.group, r.version, r.plural): r for r in BUILTINS}
        for name in _DEFAULT_NAMESPACES:
            self.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def compact(self) -> None:
        self.history.clear()
        self.compacted_rv = self.rv

    def snapshot(self) -> tuple[int, dict[Key, JSON]]:
        """What an etcd snapshot keeps: every object and the revision."""
        return self.rv, copy.deepcopy(self.objects)

    def restore(self, snapshot: tuple[int, dict[Key, JSON]]) -> None:
        """An etcd restore: the objects and revision of `snapshot`, no history, no watches.

        The revision goes back, so a client's newer resourceVersion is now "too large".
        """
        self.close_watches()
        self.rv, objects = snapshot
        self.objects = copy.deepcopy(objects)
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
        # customresource_handler.go: a CRD's resource answers once its names are accepted.
        if res is None or (res.crd and self.crd_condition(res.crd) is None):
            raise ApiError(404, "the server could not find the requested resource")
        return res

    def crd_condition(self, name: str) -> str | None:
        """Established, NamesAccepted (served, not yet discoverable) or None (not served)."""
        crd = self.objects.get((*CRDS, "", name))
        for kind in ("Established", "NamesAccepted"):
            if crd is not None and condition_true(crd, kind):
                return kind
        return None

    def crd_terminating(self, name: str) -> bool:
        crd = self.objects.get((*CRDS, "", name))
        return crd is not None and condition_true(crd, "Terminating")

    def resource_for(self, group: str, plural: str) -> Resource:
        """A served version of a group's resource (its versions share the objects)."""
        return next(r for r in self.resources.values() if (r.group, r.plural) == (group, plural))

    def by_uid(self, uid: str) -> tuple[Key, JSON] | None:
        for key, obj in self.objects.items():
            if _meta(obj).get("uid") == uid:
                return key, obj
        return None

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
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return new  # the store's first objects, before its loop serves
        # After the change is stored and answered, as a controller's informer sees it.
        for controller in [*self.system, *self.controllers]:
            loop.call_soon(controller.react, self, change)
        return new

    def later(self, seconds: float, action: Callable[[], object]) -> None:
        """Run `action` in the loop after `seconds` (a controller's requeue); reset cancels it."""
        self._timers = [t for t in self._timers if not t.cancelled()]
        self._timers.append(asyncio.get_running_loop().call_later(seconds, action))

    def write(self, res: Resource, obj: JSON) -> JSON:
        """A controller's update of a stored object (status included), by its own metadata."""
        meta = _meta(obj)
        key = (res.group, res.plural, meta.get("namespace") or "", meta["name"])
        old = self.objects.get(key)
        if old is None:
            raise _not_found(res, meta["name"])
        return self.present(res, self._update(res, key, old, obj))

    def _update(self, res: Resource, key: Key, old: JSON, new: JSON) -> JSON:
        """Store a changed object: no-op writes keep their rv; released deletions complete."""
        validate(res.group, res.kind, new)
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
        if new_meta.get("deletionTimestamp") and not held(res, new):
            return self.remove(res, key, new)
        return self._commit(res, key, old, new, "MODIFIED")

    def remove(self, res: Resource, key: Key, obj: JSON) -> JSON:
        """Drop the object for good (its deletion is complete): DELETED."""
        return self._commit(res, key, copy.deepcopy(obj), obj, "DELETED")

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
        if (res.group, res.plural) == NAMESPACES:
            # The namespace strategy's PrepareForCreate: the namespace controller's finalizer.
            spec = obj.setdefault("spec", {})
            spec.setdefault("finalizers", [NAMESPACE_FINALIZER])
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
        """Remove at once, finalizers or not (a test's hammer, not kube-apiserver's DELETE)."""
        res = self.served(group, version, plural)
        key = (group, plural, ns, name)
        if key not in self.objects:
            raise _not_found(res, name)
        self.remove(res, key, copy.deepcopy(self.objects[key]))

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

    def create(self, res: Resource, ns: str, obj: JSON, *, verb: str = "create") -> JSON:
        """A POST (`verb` "create"), or a server-side apply that creates ("patch")."""
        shown = _meta(obj).get("name") or _meta(obj).get("generateName") or ""
        key, obj = self._admit(res, ns, obj)
        validate(res.group, res.kind, obj)
        self.admit_create(res, ns, key[3], verb)
        for controller in self.controllers:
            admit = getattr(controller, "admit", None)
            if admit is not None:
                admit(self, res, ns, obj, shown)
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

    def admit_create(self, res: Resource, ns: str, name: str, verb: str) -> None:
        """NamespaceLifecycle admission (apiserver plugin/namespace/lifecycle/admission.go),
        and no POST while a CRD terminates (customresource_handler.go serveResource refuses
        the verb "create" only: a server-side apply is the verb "patch", which patch.go
        lets create, `forceAllowCreate`; the CRD finalizer then deletes what it made)."""
        namespace = self.objects.get((*NAMESPACES, "", ns)) if res.namespaced else None
        if res.namespaced and namespace is None:
            raise ApiError(
                404, f'namespaces "{ns}" not found', details={"name": ns, "kind": "namespaces"}
            )
        if namespace is not None and (namespace.get("status") or {}).get("phase") == "Terminating":
            raise ApiError(
                403,
                f'{res.qualified} "{name}" is forbidden: unable to create new content in'
                f" namespace {ns} because it is being terminated",
                details={
                    "name": name,
                    "group": res.group,
                    "kind": res.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {ns} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )
        if verb == "create" and res.crd and self.crd_terminating(res.crd):
            raise ApiError(
                405, "create not allowed while custom resource definition is terminating"
            )

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
                return self.create(res, ns, body, verb="patch"), 201
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
