"""How objects end in the Kubernetes API emulator: DELETE, namespaces and garbage collection.

`delete` is kube-apiserver's DELETE. Finalizers hold an object, marked with a deletionTimestamp,
until someone removes them; `propagationPolicy` adds the garbage collector's own finalizers
(`foregroundDeletion`, `orphan`) or removes them, as the generic registry store does (kubernetes
staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go,
`deletionFinalizersForGarbageCollection`). A Namespace turns `Terminating` and keeps its
`kubernetes` finalizer until the namespace controller has removed its content; a second DELETE
of it meanwhile answers 200 with the Namespace as it is
(pkg/registry/core/namespace/storage/storage.go `REST.Delete`, kubernetes 94341df; a 409
Conflict before v1.17, kubernetes/kubernetes#84122). A CustomResourceDefinition gets the
`customresourcecleanup` finalizer (apiextensions-apiserver
pkg/registry/customresourcedefinition/etcd.go; `kube_crds` finishes it). A Pod bound to a Node
and not yet ended is deleted gracefully (pkg/registry/core/pod/strategy.go,
`CheckGracefulDelete`; rest/delete.go `BeforeDelete`): it gets a deletionTimestamp
`terminationGracePeriodSeconds` (API default 30) ahead and `deletionGracePeriodSeconds`, and
stays until its kubelet (`kube_kubelet`) has stopped its containers and deletes it with grace 0;
an unbound or ended Pod goes at once.

The two controllers below run in every emulated cluster, as kube-controller-manager's do:
`NamespaceController` (pkg/controller/namespace/deletion/namespaced_resources_deleter.go)
deletes a terminating namespace's content, reports what remains in the namespace's
conditions and drops its finalizer once nothing is left; `GarbageCollector`
(pkg/controller/garbagecollector/garbagecollector.go, `attemptToDeleteItem`) deletes
objects whose owners (ownerReferences, by uid) are gone, deletes a foreground-deleted
owner's dependents before releasing it, and orphans dependents for an `orphan` finalizer.
"""

from __future__ import annotations

import collections
import copy
import datetime

from tests.support.kube_resources import Resource
from tests.support.kube_semantics import JSON, ApiError
from tests.support.kube_store import (
    CRDS,
    NAMESPACE_FINALIZER,
    NAMESPACES,
    Change,
    Key,
    Store,
    held,
)

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"
#: kube-apiserver refuses to delete these (the NamespaceLifecycle admission plugin).
IMMORTAL = ("default", "kube-system", "kube-public")
POLICIES = ("Background", "Foreground", "Orphan")
PODS = ("", "pods")
#: pkg/apis/core/v1/defaults.go: DefaultTerminationGracePeriodSeconds.
DEFAULT_GRACE_SECONDS = 30


def _now(ahead: float = 0.0) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=ahead)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def grace_seconds(pod: JSON) -> int:
    """The grace period a DELETE gives `pod`: 0 unless bound and not ended (CheckGracefulDelete)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        return 0
    grace = spec.get("terminationGracePeriodSeconds")
    return int(DEFAULT_GRACE_SECONDS if grace is None else grace)


def _meta(obj: JSON) -> JSON:
    meta: JSON = obj.setdefault("metadata", {})
    return meta


def set_condition(obj: JSON, kind: str, status: str, reason: str, message: str) -> None:
    """Set one condition of `obj`'s status; its transition time moves only when it flips."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    old = next((c for c in conditions if c.get("type") == kind), None)
    when = old["lastTransitionTime"] if old and old.get("status") == status else _now()
    new = {
        "type": kind,
        "status": status,
        "lastTransitionTime": when,
        "reason": reason,
        "message": message,
    }
    if old is None:
        conditions.append(new)
    else:
        conditions[conditions.index(old)] = new


def _gc_finalizers(finalizers: list[str], policy: str | None) -> list[str]:
    # store.go: Orphan adds `orphan`, Foreground `foregroundDeletion` (each dropping the
    # other), Background drops both; no policy keeps what the object has.
    if policy is None:
        return finalizers
    kept = [f for f in finalizers if f not in (FOREGROUND, ORPHAN)]
    extra = {"Orphan": [ORPHAN], "Foreground": [FOREGROUND]}.get(policy, [])
    return kept + [f for f in extra if f not in kept]


def delete(store: Store, res: Resource, ns: str, name: str, policy: str | None = None) -> JSON:
    """kube-apiserver's DELETE: the object, still there, or a Success Status once gone."""
    if policy is not None and policy not in POLICIES:
        raise ApiError(422, f"DeleteOptions.propagationPolicy: Unsupported value: {policy!r}")
    old = store.existing(res, ns, name)
    new = copy.deepcopy(old)
    meta = _meta(new)
    kind = (res.group, res.plural)
    if kind == NAMESPACES:
        if name in IMMORTAL:
            raise ApiError(
                403,
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                details={"name": name, "kind": "namespaces"},
            )
        if meta.get("deletionTimestamp") and (new.get("spec") or {}).get("finalizers"):
            # storage.go REST.Delete: the Namespace as it is, 200 (a 409 Conflict before
            # v1.17, kubernetes/kubernetes#84122).
            return new
        new.setdefault("status", {})["phase"] = "Terminating"
    if kind == CRDS:
        if CRD_CLEANUP not in meta.setdefault("finalizers", []):
            meta["finalizers"].append(CRD_CLEANUP)
        set_condition(
            new,
            "Terminating",
            "True",
            "InstanceDeletionPending",
            "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
        )
    meta["finalizers"] = _gc_finalizers(list(meta.get("finalizers") or []), policy)
    if not meta["finalizers"]:
        del meta["finalizers"]
    grace = 0
    if kind == PODS and not meta.get("deletionTimestamp"):
        grace = grace_seconds(new)
        if grace:
            meta["deletionGracePeriodSeconds"] = grace
    if held(res, new):
        meta.setdefault("deletionTimestamp", _now(grace))
        return store.write(res, new)
    store.remove(res, (res.group, res.plural, ns, name), old)
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": res.group, "kind": res.plural, "uid": meta.get("uid")},
    }


def _key_of(obj: JSON) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta["name"]


# --- the namespace controller -----------------------------------------------------------


class NamespaceController:
    """Deletes a terminating namespace's content; drops its finalizer once none is left."""

    def reset(self) -> None:
        pass

    def react(self, store: Store, change: Change) -> None:
        if (change.group, change.plural) == NAMESPACES:
            name = (change.new.get("metadata") or {}).get("name", "")
        else:
            name = (change.new.get("metadata") or {}).get("namespace") or ""
        namespace = store.objects.get((*NAMESPACES, "", name)) if name else None
        if namespace is not None and (namespace.get("metadata") or {}).get("deletionTimestamp"):
            self.sync(store, name)

    def sync(self, store: Store, name: str) -> None:
        namespace_res = store.resource_for(*NAMESPACES)
        content = [(k, o) for k, o in store.objects.items() if k[2] == name]
        for key, obj in content:
            if not (obj.get("metadata") or {}).get("deletionTimestamp"):
                # namespaced_resources_deleter.go deletes each resource's collection with
                # background propagation; finalizers then hold what they hold.
                delete(store, store.resource_for(key[0], key[1]), name, key[3], "Background")
        remaining = [(k, o) for k, o in store.objects.items() if k[2] == name]
        namespace = copy.deepcopy(store.objects[(*NAMESPACES, "", name)])
        if remaining:
            self._report(namespace, remaining)
            store.write(namespace_res, namespace)
            return
        set_condition(
            namespace,
            "NamespaceContentRemaining",
            "False",
            "ContentRemoved",
            "All content successfully removed",
        )
        set_condition(
            namespace,
            "NamespaceFinalizersRemaining",
            "False",
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished",
        )
        spec = namespace.setdefault("spec", {})
        spec["finalizers"] = [f for f in spec.get("finalizers") or [] if f != NAMESPACE_FINALIZER]
        store.write(namespace_res, namespace)

    @staticmethod
    def _report(namespace: JSON, remaining: list[tuple[Key, JSON]]) -> None:
        # The conditions' wording is the namespace controller's, so a step can quote it.
        resources: collections.Counter[str] = collections.Counter()
        finalizers: collections.Counter[str] = collections.Counter()
        for key, obj in remaining:
            resources[f"{key[1]}.{key[0]}"] += 1
            finalizers.update((obj.get("metadata") or {}).get("finalizers") or [])
        set_condition(
            namespace,
            "NamespaceContentRemaining",
            "True",
            "SomeResourcesRemain",
            "Some resources are remaining: "
            + ", ".join(f"{r} has {n} resource instances" for r, n in sorted(resources.items())),
        )
        if finalizers:
            set_condition(
                namespace,
                "NamespaceFinalizersRemaining",
                "True",
                "SomeFinalizersRemain",
                "Some content in the namespace has finalizers remaining: "
                + ", ".join(
                    f"{f} in {n} resource instances" for f, n in sorted(finalizers.items())
                ),
            )


# --- the garbage collector --------------------------------------------------------------


def _refs(obj: JSON) -> list[JSON]:
    refs: list[JSON] = (obj.get("metadata") or {}).get("ownerReferences") or []
    return refs


class GarbageCollector:
    """Deletes dependents whose owners are gone, as kube-controller-manager's collector does."""

    def reset(self) -> None:
        pass

    def react(self, store: Store, change: Change) -> None:
        meta: JSON = change.new.get("metadata") or {}
        uid = meta.get("uid", "")
        if change.type == "DELETED":
            for key, dependent in self._dependents(store, uid):
                self._attempt_delete(store, key, dependent)
            for ref in _refs(change.new):
                self._owner_changed(store, ref.get("uid", ""))
            return
        finalizers = meta.get("finalizers") or []
        if meta.get("deletionTimestamp") and FOREGROUND in finalizers:
            self._delete_dependents(store, change.new)
        elif meta.get("deletionTimestamp") and ORPHAN in finalizers:
            self._orphan_dependents(store, change.new)
        if _refs(change.new) and (change.old is None or _refs(change.old) != _refs(change.new)):
            key = (change.group, change.plural, *_key_of(change.new))
            if key in store.objects:
                self._attempt_delete(store, key, store.objects[key])

    @staticmethod
    def _dependents(store: Store, uid: str) -> list[tuple[Key, JSON]]:
        return [
            (key, obj)
            for key, obj in store.objects.items()
            if any(ref.get("uid") == uid for ref in _refs(obj))
        ]

    def _owner_changed(self, store: Store, uid: str) -> None:
        found = store.by_uid(uid)
        if found is not None:
            meta = found[1].get("metadata") or {}
            if meta.get("deletionTimestamp") and FOREGROUND in (meta.get("finalizers") or []):
                self._delete_dependents(store, found[1])

    def _attempt_delete(self, store: Store, key: Key, obj: JSON) -> None:
        solid: list[str] = []
        dangling: list[str] = []
        waiting: list[str] = []
        for ref in _refs(obj):
            found = store.by_uid(ref.get("uid", ""))
            owner_meta = (found[1].get("metadata") or {}) if found else {}
            if found is None:
                dangling.append(ref.get("uid", ""))
            elif owner_meta.get("deletionTimestamp") and FOREGROUND in (
                owner_meta.get("finalizers") or []
            ):
                waiting.append(ref.get("uid", ""))
            else:
                solid.append(ref.get("uid", ""))
        res = store.resource_for(key[0], key[1])
        if solid:
            if dangling or waiting:
                gone = set(dangling + waiting)
                kept = copy.deepcopy(obj)
                _meta(kept)["ownerReferences"] = [r for r in _refs(obj) if r.get("uid") not in gone]
                store.write(res, kept)
            return
        finalizers = (obj.get("metadata") or {}).get("finalizers") or []
        policy = "Background"
        if waiting and self._dependents(store, (obj.get("metadata") or {}).get("uid", "")):
            policy = "Foreground"
        elif ORPHAN in finalizers:
            policy = "Orphan"
        elif FOREGROUND in finalizers:
            policy = "Foreground"
        delete(store, res, key[2], key[3], policy)

    def _delete_dependents(self, store: Store, owner: JSON) -> None:
        uid = (owner.get("metadata") or {}).get("uid", "")
        for key, dependent in self._dependents(store, uid):
            if not (dependent.get("metadata") or {}).get("deletionTimestamp"):
                self._attempt_delete(store, key, dependent)
        blocking = [
            key
            for key, dependent in self._dependents(store, uid)
            if any(r.get("uid") == uid and r.get("blockOwnerDeletion") for r in _refs(dependent))
        ]
        if not blocking:
            self._release(store, owner, FOREGROUND)

    def _orphan_dependents(self, store: Store, owner: JSON) -> None:
        uid = (owner.get("metadata") or {}).get("uid", "")
        for key, dependent in self._dependents(store, uid):
            kept = copy.deepcopy(dependent)
            _meta(kept)["ownerReferences"] = [r for r in _refs(dependent) if r.get("uid") != uid]
            store.write(store.resource_for(key[0], key[1]), kept)
        self._release(store, owner, ORPHAN)

    @staticmethod
    def _release(store: Store, owner: JSON, finalizer: str) -> None:
        found = store.by_uid((owner.get("metadata") or {}).get("uid", ""))
        if found is None:
            return
        key, current = found
        released = copy.deepcopy(current)
        meta = _meta(released)
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != finalizer]
        store.write(store.resource_for(key[0], key[1]), released)
