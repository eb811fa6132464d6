"""`addon_remove`: deletes exactly what an `addon_install` step applied, tier by tier.

The inventory comes from the latest succeeded run, for the same cluster, of the template
and step named by `fromTemplate` and `fromStep`, or is given as a list. With no such run
nothing was installed here, so there is nothing to remove: the step succeeds at once
(an add-on profile's removal runs for every matching cluster, installed or not).

Removal goes in three tiers, each deleted newest first and waited for before the next:

1. custom resources: the inventory's objects served through a CustomResourceDefinition
   (a Helm chart's too, but those it keeps), and every instance of the CRDs the inventory
   holds. Their finalizers are cleared by
   their controllers, which must still run: deleting a controller or a CRD first leaves
   them (and then the CRD, whose finalizer waits for its instances, and their Namespace)
   stuck for good (apiextensions-apiserver pkg/controller/finalizer/crd_finalizer.go).
2. the rest but CRDs and Namespaces: controllers, RBAC, configuration; a Helm release is
   uninstalled (its objects go with it).
3. CustomResourceDefinitions and Namespaces (a Namespace goes once its content is gone).

The step is done when each object answers 404 (but those helm keeps). A tier not done
by the step's timeout fails the step a few seconds before it, naming what is stuck and
the finalizers that hold it.
"""

from __future__ import annotations

import contextlib
from typing import Any

from hooksvc.contract import wire
from workflows import errors
from workflows.kube import k8s, manifests
from workflows.models import Run, StepRun
from workflows.steps import helm, objects, registry

JSON = dict[str, Any]
TIERS = ("custom resources", "objects", "CustomResourceDefinitions and Namespaces")
CRD_API = "apiextensions.k8s.io/v1"
#: How many stuck objects a failure names (the output lists them all).
NAMED = 3


def _check_inventory(value: list[Any]) -> list[Any]:
    for index, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise registry.ParamError("", f"item {index} must be an object")
        helm_entry = isinstance(entry.get("helmRelease"), str)
        if not helm_entry and not all(
            isinstance(entry.get(k), str) for k in ("apiVersion", "kind", "name")
        ):
            raise registry.ParamError(
                "", f"item {index} needs apiVersion, kind and name (or helmRelease)"
            )
    return value


def _check(params: dict[str, Any], hook: str) -> None:
    named = bool(params.get("fromTemplate")) + bool(params.get("fromStep"))
    if named == 1:
        raise registry.ParamError("fromStep", "fromTemplate and fromStep go together")
    if bool(named) == bool(params.get("inventory")):
        raise registry.ParamError(
            "inventory", "give either fromTemplate and fromStep, or inventory"
        )


PARAMS = {
    "fromTemplate": registry.Param(str),
    "fromStep": registry.Param(str),
    "inventory": registry.Param(list, check=_check_inventory, items=registry.Param(dict)),
    "pollSeconds": registry.Param((int, float), default=5, minimum=1),
}


NOTHING_INSTALLED = "nothing installed"


def _installed(ctx: registry.StepContext) -> list[dict[str, Any]] | None:
    """The install step's inventory for this cluster; None when it never succeeded here."""
    template, step = ctx.params["fromTemplate"], ctx.params["fromStep"]
    cluster = ctx.cluster
    key = wire.cluster_key(
        str(cluster.get("uid") or ""), str(cluster.get("namespace")), str(cluster.get("name"))
    )
    found = (
        StepRun.objects.filter(
            run__template_name=template,
            run__cluster_key=key,
            run__state=Run.State.SUCCEEDED,
            name=step,
            state=StepRun.State.SUCCEEDED,
        )
        .order_by("-run__finished_at", "-run_id")
        .values_list("output", flat=True)
        .first()
    )
    if found is None or "inventory" not in found:
        return None
    inventory: list[dict[str, Any]] = found["inventory"]
    return inventory


def _what(entry: dict[str, Any]) -> str:
    if entry.get("helmRelease") and "kind" not in entry:
        return f"Helm release {entry.get('namespace')}/{entry['helmRelease']}"
    scope = f"{entry['namespace']}/" if entry.get("namespace") else ""
    return f"{entry['kind']} {scope}{entry['name']}"


def _is_definition(entry: JSON) -> bool:
    return (entry.get("apiVersion"), entry.get("kind")) in (
        (CRD_API, "CustomResourceDefinition"),
        ("v1", "Namespace"),
    )


def _is_custom(api: k8s.ApiClient, entry: JSON) -> bool:
    """True when a CustomResourceDefinition serves the entry's kind."""
    group = str(entry["apiVersion"]).rpartition("/")[0]
    if not group:
        return False
    try:
        plural, _ = manifests.resource(api, entry["apiVersion"], entry["kind"])
    except k8s.NotServed:
        return False  # gone with its CRD already
    path = objects.path(CRD_API, "customresourcedefinitions", name=f"{plural}.{group}")
    return objects.get(api, path, what=f"CustomResourceDefinition {plural}.{group}") is not None


def _plan(api: k8s.ApiClient, inventory: list[JSON]) -> list[list[int]]:
    """The inventory's indexes per tier."""
    tiers: list[list[int]] = [[], [], []]
    for index, entry in enumerate(inventory):
        if "kind" not in entry:
            tiers[1].append(index)  # a Helm release
        elif _is_definition(entry):
            # A chart's CRDs go with its uninstall (tier 2); those of its crds/ directory
            # are not in `helm get manifest`, so not in the inventory.
            tiers[1 if entry.get("helmRelease") else 2].append(index)
        else:
            tiers[0 if _is_custom(api, entry) else 1].append(index)
    return tiers


def _instances(api: k8s.ApiClient, crd_name: str) -> list[JSON]:
    """Every instance of the CRD `crd_name` (all namespaces), as inventory-like entries."""
    path = objects.path(CRD_API, "customresourcedefinitions", name=crd_name)
    crd = objects.get(api, path, what=f"CustomResourceDefinition {crd_name}")
    if crd is None:
        return []
    spec = crd.get("spec") or {}
    served = [v["name"] for v in spec.get("versions") or [] if v.get("served", True)]
    if not served:
        return []
    api_version, kind = f"{spec.get('group')}/{served[0]}", (spec.get("names") or {}).get("kind")
    try:
        collection = manifests.collection_path(api, api_version, str(kind))
    except k8s.NotServed:
        return []
    found = objects.items(api, collection, what=f"{kind} objects")
    return [
        {
            "apiVersion": api_version,
            "kind": kind,
            "namespace": item["metadata"].get("namespace"),
            "name": item["metadata"]["name"],
        }
        for item in found
    ]


def _tier_entries(ctx: registry.StepContext, api: k8s.ApiClient, tier: int) -> list[JSON]:
    """What the tier deletes and waits for, oldest first."""
    inventory: list[JSON] = ctx.memo["inventory"]
    entries = [inventory[i] for i in ctx.memo["tiers"][tier]]
    if tier == 0:
        known = {
            (e.get("apiVersion"), e.get("kind"), e.get("namespace"), e["name"]) for e in entries
        }
        for crd in inventory:
            if crd.get("kind") == "CustomResourceDefinition":
                for item in _instances(api, crd["name"]):
                    key = (item["apiVersion"], item["kind"], item["namespace"], item["name"])
                    if key not in known:
                        entries.append(item)
    return entries


def _check_served(api: k8s.ApiClient, inventory: list[JSON], release: JSON) -> None:
    """Fail when the cluster no longer serves a kind of the release's objects: helm cannot
    uninstall it then (helm v3.17 and v4 pkg/action/uninstall.go `deleteRelease` builds every
    object it deletes, and an unknown kind fails the whole uninstall, "failed to delete
    release"), however often it is retried. Objects helm keeps are not built."""
    name, asked = release["helmRelease"], set()
    for entry in inventory:
        if entry.get("helmRelease") != name or "kind" not in entry or entry.get("keep"):
            continue
        try:
            # Discovery afresh, once per group version: the cached one may list a kind gone.
            fresh = entry["apiVersion"] not in asked
            asked.add(entry["apiVersion"])
            manifests.resource(api, entry["apiVersion"], entry["kind"], fresh=fresh)
        except k8s.NotServed:
            served = f"{entry['apiVersion']} {entry['kind']}"
            raise errors.PermanentError(
                f"{_what(release)}: helm cannot uninstall it while the cluster does not serve"
                f" {served} (its CustomResourceDefinition was deleted first)"
            ) from None


def _delete_tier(
    ctx: registry.StepContext, api: k8s.ApiClient, entries: list[JSON], tier: int
) -> None:
    for entry in reversed(entries):
        if "kind" not in entry:
            _check_served(api, ctx.memo["inventory"], entry)
            helm.uninstall(ctx, entry["helmRelease"], entry.get("namespace") or "default")
            continue
        if entry.get("helmRelease") and (tier > 0 or entry.get("keep")):
            # The release's uninstall deletes it (helm keeps what says `keep`). A chart's
            # custom resources go first, like any: their controller must still run, and
            # helm's uninstall then finds them gone (pkg/kube/client.go ignores a 404).
            continue
        try:
            path = objects.inventory_path(api, entry)
        except k8s.NotServed:
            continue  # its kind is no longer served: its objects went with it
        # A Namespace already terminating answers 200 to another DELETE, 409 before
        # Kubernetes 1.17 (kubernetes/kubernetes#84122).
        with contextlib.suppress(k8s.Conflict):
            objects.delete(api, path, what=_what(entry))


def _deleting(found: JSON) -> bool:
    return bool((found.get("metadata") or {}).get("deletionTimestamp"))


def _holders(found: JSON) -> str:
    """What holds a deleted object: its finalizers, and for a Namespace what it still holds."""
    meta = found.get("metadata") or {}
    held = list(meta.get("finalizers") or [])
    if found.get("kind") == "Namespace":
        held += (found.get("spec") or {}).get("finalizers") or []
        for condition in (found.get("status") or {}).get("conditions") or []:
            if condition.get("status") == "True" and condition.get("type") in (
                "NamespaceContentRemaining",
                "NamespaceFinalizersRemaining",
            ):
                held.append(str(condition.get("message", ""))[:200])
    return f" (finalizers: {'; '.join(held)})" if held else ""


def _remaining(api: k8s.ApiClient, entries: list[JSON]) -> list[tuple[JSON, JSON]]:
    """Each entry still there, with its object, in inventory order."""
    found = []
    for entry in entries:
        if "kind" not in entry or entry.get("keep"):
            continue  # a release, or an object helm keeps on uninstall
        try:
            path = objects.inventory_path(api, entry)
        except k8s.NotServed:
            continue
        obj = objects.get(api, path, what=_what(entry))
        if obj is not None:
            found.append((entry, obj))
    return found


def _wait(ctx: registry.StepContext, tier: int, stuck: list[str]) -> registry.Poll:
    """Poll again, or fail when the step's timeout comes before the next poll."""
    name = TIERS[tier]
    more = f"; and {len(stuck) - NAMED} more" if len(stuck) > NAMED else ""
    return objects.wait_or_fail(
        ctx,
        after=float(ctx.params["pollSeconds"]),
        message=f"removing {name}: waiting for {len(stuck)} to be gone: {stuck[0]}",
        output={"removing": name, "remaining": stuck},
        failure=f"{name} not gone within the step's timeout: {', '.join(stuck[:NAMED])}{more}",
    )


@registry.step_type(
    "addon_remove", params=PARAMS, check=_check, call_timeout_seconds=helm.call_bound()
)
def addon_remove(ctx: registry.StepContext) -> registry.Outcome:
    """Deletes what an addon_install step applied, tier by tier, and waits until it is gone."""
    if "inventory" not in ctx.memo:
        installed = ctx.params.get("inventory") or _installed(ctx)
        if installed is None:
            return registry.Done({"removed": [], "result": NOTHING_INSTALLED})
        ctx.memo["inventory"] = installed
    api = objects.workload(ctx)
    if "tiers" not in ctx.memo:
        ctx.memo.update(tiers=_plan(api, ctx.memo["inventory"]), tier=0, deleted=False)
    while (tier := int(ctx.memo["tier"])) < len(TIERS):
        entries = _tier_entries(ctx, api, tier)
        if not ctx.memo["deleted"]:
            _delete_tier(ctx, api, entries, tier)
            ctx.memo["deleted"] = True
        remaining = _remaining(api, entries)
        # Made again since (a controller, a new instance of a CRD): deleted again.
        _delete_tier(ctx, api, [e for e, obj in remaining if not _deleting(obj)], tier)
        if remaining:
            return _wait(ctx, tier, [_what(e) + _holders(obj) for e, obj in remaining])
        ctx.memo.update(tier=tier + 1, deleted=False)
    return registry.Done({"removed": ctx.memo["inventory"]})
