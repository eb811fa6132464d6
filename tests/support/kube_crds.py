"""CustomResourceDefinitions in the Kubernetes API emulator, as apiextensions-apiserver runs them.

Follows kubernetes master as read for issue 23 (customresource_handler.go at 01aa0f3f,
crd_finalizer.go at 045cf2a2, customresource_discovery_controller.go at 04791b49, and
naming_controller.go, the CRD registry's etcd.go and apiserver's patch.go of the same time).

A CRD created through the API becomes a served resource in three moves, each one of
apiextensions-apiserver's controllers (kubernetes staging/src/k8s.io/apiextensions-apiserver):
the naming controller (pkg/controller/status/naming_controller.go) accepts the names, or
reports a conflict with another CRD of the group, and sets `NamesAccepted` with
`Established` False (`Installing`); from then on requests for the resource are answered
(pkg/apiserver/customresource_handler.go), but discovery does not list it. The
establishing controller (pkg/controller/establish/establishing_controller.go) then sets
`Established` True (`InitialNamesAccepted`), after `establish_delay` seconds here, and
discovery lists it (customresource_discovery_controller.go). A deleted CRD is finalized by
the CRD finalizer (pkg/controller/finalizer/crd_finalizer.go): `Terminating`, every custom
resource deleted (their own finalizers hold them, and one created meanwhile is deleted too),
then the cleanup finalizer dropped. While it terminates, a POST of a custom resource is
refused (405, `kube_store`), a server-side apply creates it, and discovery lists no create,
patch or update verbs (customresource_discovery_controller.go `sync`).
"""

from __future__ import annotations

import copy

from tests.support import kube_lifecycle
from tests.support.kube_resources import Resource
from tests.support.kube_semantics import JSON
from tests.support.kube_store import CRDS, Change, Store, condition_true


def _names(crd: JSON) -> JSON:
    names: JSON = (crd.get("spec") or {}).get("names") or {}
    return names


class CRDControllers:
    """The naming, establishing and finalizing controllers of apiextensions-apiserver."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        #: Seconds between names accepted and Established (a test sets it; 0: at once).
        self.establish_delay = 0.0
        self._pending: set[str] = set()

    def react(self, store: Store, change: Change) -> None:
        if (change.group, change.plural) != CRDS:
            if change.type in ("ADDED", "DELETED"):
                # A custom resource gone: its terminating CRD may be finished now. One made
                # while it terminates (a server-side apply may create): deleted too, as
                # crd_finalizer.go's requeued sync deletes every instance it lists.
                owner = next(
                    (r.crd for r in store.resources.values() if r.crd and
                     (r.group, r.plural) == (change.group, change.plural)),
                    "",
                )  # fmt: skip
                if owner and (*CRDS, "", owner) in store.objects:
                    self._finalize(store, owner)
            return
        name = (change.new.get("metadata") or {}).get("name", "")
        if change.type == "DELETED":
            for key in [k for k, r in store.resources.items() if r.crd == name]:
                del store.resources[key]
            return
        crd: JSON | None = store.objects.get((*CRDS, "", name))
        if crd is None:
            return
        if (crd.get("metadata") or {}).get("deletionTimestamp"):
            self._finalize(store, name)
            return
        self._serve(store, crd)
        self._accept_names(store, crd)

    @staticmethod
    def _serve(store: Store, crd: JSON) -> None:
        """Register each served version (answered once names are accepted: `Store.served`)."""
        spec, name = crd.get("spec") or {}, crd["metadata"]["name"]
        names = _names(crd)
        wanted = {}
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            key = (spec.get("group", ""), version["name"], names.get("plural", ""))
            existing = store.resources.get(key)
            if existing is not None and existing.crd != name:
                continue  # a built-in (or declared) resource keeps its own storage
            wanted[key] = Resource(
                *key,
                kind=names.get("kind", ""),
                namespaced=spec.get("scope") == "Namespaced",
                status="status" in (version.get("subresources") or {}),
                crd=name,
            )
        for key in [k for k, r in store.resources.items() if r.crd == name and k not in wanted]:
            del store.resources[key]
        store.resources.update(wanted)

    def _accept_names(self, store: Store, crd: JSON) -> None:
        name, names = crd["metadata"]["name"], _names(crd)
        accepted = (crd.get("status") or {}).get("acceptedNames")
        if accepted == names and condition_true(crd, "NamesAccepted"):
            self._establish_later(store, name)
            return
        group = (crd.get("spec") or {}).get("group")
        # naming_controller.go `getAcceptedNamesForGroup`: the other CRDs' resource names
        # (plural, singular) and kinds (kind, listKind) are two sets.
        resources: set[str] = set()
        kinds: set[str] = set()
        for key, other in store.objects.items():
            if key[:2] != CRDS or key[3] == name or (other.get("spec") or {}).get("group") != group:
                continue
            other_names = (other.get("status") or {}).get("acceptedNames") or {}
            resources |= {other_names[f] for f in ("plural", "singular") if other_names.get(f)}
            kinds |= {other_names[f] for f in ("kind", "listKind") if other_names.get(f)}
        new = copy.deepcopy(crd)
        # `calculateNamesAndConditions` checks plural, singular, kind, listKind in turn and
        # each conflict overwrites the condition: the last one is the reason.
        conflict = None
        for field, taken in (("plural", resources), ("singular", resources),
                             ("kind", kinds), ("listKind", kinds)):  # fmt: skip
            if names.get(field) and names[field] in taken:
                conflict = field
        if conflict is None:
            new.setdefault("status", {})["acceptedNames"] = names
            kube_lifecycle.set_condition(
                new, "NamesAccepted", "True", "NoConflicts", "no conflicts found"
            )
            if not condition_true(crd, "Established"):
                kube_lifecycle.set_condition(
                    new,
                    "Established",
                    "False",
                    "Installing",
                    "the initial names have been accepted",
                )
        else:
            reason = {"listKind": "ListKind"}.get(conflict, conflict.capitalize()) + "Conflict"
            kube_lifecycle.set_condition(
                new, "NamesAccepted", "False", reason, f'"{names[conflict]}" is already in use'
            )
            if not condition_true(crd, "Established"):
                kube_lifecycle.set_condition(
                    new, "Established", "False", "NotAccepted", "not all names are accepted"
                )
        store.write(store.resource_for(*CRDS), new)

    def _establish_later(self, store: Store, name: str) -> None:
        crd = store.objects.get((*CRDS, "", name))
        if crd is None or condition_true(crd, "Established") or name in self._pending:
            return
        self._pending.add(name)

        def establish() -> None:
            self._pending.discard(name)
            current = store.objects.get((*CRDS, "", name))
            if current is None or not condition_true(current, "NamesAccepted"):
                return
            new = copy.deepcopy(current)
            kube_lifecycle.set_condition(
                new, "Established", "True", "InitialNamesAccepted",
                "the initial names have been accepted",
            )  # fmt: skip
            store.write(store.resource_for(*CRDS), new)

        store.later(self.establish_delay, establish)

    @staticmethod
    def _finalize(store: Store, name: str) -> None:
        crd = store.objects[(*CRDS, "", name)]
        meta = crd.get("metadata") or {}
        if kube_lifecycle.CRD_CLEANUP not in (meta.get("finalizers") or []):
            return
        new = copy.deepcopy(crd)
        served = [r for r in store.resources.values() if r.crd == name]
        if condition_true(crd, "Established") and served:
            res = served[0]
            instances = [k for k in store.objects if k[:2] == (res.group, res.plural)]
            for key in instances:
                if not (store.objects[key].get("metadata") or {}).get("deletionTimestamp"):
                    kube_lifecycle.delete(store, res, key[2], key[3], "Background")
            remaining = [k for k in store.objects if k[:2] == (res.group, res.plural)]
            if remaining:
                kube_lifecycle.set_condition(
                    new, "Terminating", "True", "InstanceDeletionInProgress",
                    "CustomResource deletion is in progress",
                )  # fmt: skip
                store.write(store.resource_for(*CRDS), new)
                return
            kube_lifecycle.set_condition(
                new, "Terminating", "False", "InstanceDeletionCompleted", "removed all instances"
            )
        else:
            kube_lifecycle.set_condition(
                new, "Terminating", "False", "NeverEstablished", "resource was never established"
            )
        new_meta = new["metadata"]
        new_meta["finalizers"] = [
            f for f in new_meta.get("finalizers") or [] if f != kube_lifecycle.CRD_CLEANUP
        ]
        store.write(store.resource_for(*CRDS), new)


def definition(
    group: str, kind: str, *, plural: str = "", scope: str = "Namespaced", status: bool = True
) -> JSON:
    """A minimal apiextensions.k8s.io/v1 CustomResourceDefinition of one version, v1."""
    plural = plural or f"{kind.lower()}s"
    version: JSON = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
            },
            "scope": scope,
            "versions": [version],
        },
    }
