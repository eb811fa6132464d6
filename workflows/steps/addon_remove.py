"""`addon_remove`: deletes exactly what an `addon_install` step applied, and waits until it is gone.

The inventory comes from the latest succeeded run, for the same cluster, of the template
and step named by `fromTemplate` and `fromStep`, or is given as a list. With no such run
nothing was installed here, so there is nothing to remove: the step succeeds at once
(an add-on profile's removal runs for every matching cluster, installed or not). Objects are deleted
in the reverse order of their creation (workloads before their namespaces, custom
resources before their definitions); a Helm release is uninstalled, which deletes its
objects; the step is done when each object answers 404 (but those helm keeps).
"""

from __future__ import annotations

from typing import Any

from hooksvc import wire
from workflows import k8s
from workflows.models import Run, StepRun
from workflows.steps import helm, objects, registry


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
    "inventory": registry.Param(list, check=_check_inventory),
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


@registry.step_type("addon_remove", params=PARAMS, check=_check)
def addon_remove(ctx: registry.StepContext) -> registry.Outcome:
    """Deletes what an addon_install step applied and waits until it is gone."""
    if "inventory" not in ctx.memo:
        installed = ctx.params.get("inventory") or _installed(ctx)
        if installed is None:
            return registry.Done({"removed": [], "result": NOTHING_INSTALLED})
        ctx.memo["inventory"] = installed
    inventory: list[dict[str, Any]] = ctx.memo["inventory"]
    api = objects.workload(ctx)
    if not ctx.memo.get("deleted"):
        for entry in reversed(inventory):
            if entry.get("helmRelease"):
                # A release's objects go with its uninstall, which comes after them.
                if "kind" not in entry:
                    helm.uninstall(ctx, entry["helmRelease"], entry.get("namespace") or "default")
                continue
            try:
                path = objects.inventory_path(api, entry)
            except k8s.NotFound:
                continue  # its kind is no longer served: its objects went with it
            objects.delete(api, path, what=_what(entry))
        ctx.memo["deleted"] = True
    remaining = []
    for entry in inventory:
        if "kind" not in entry or entry.get("keep"):
            continue  # a release, or an object helm keeps on uninstall
        try:
            path = objects.inventory_path(api, entry)
        except k8s.NotFound:
            continue
        if objects.get(api, path, what=_what(entry)) is not None:
            remaining.append(_what(entry))
    output = {"removed": inventory}
    if remaining:
        message = f"waiting for {len(remaining)} objects to be gone: {remaining[0]}"
        return registry.Poll(after=ctx.params["pollSeconds"], message=message)
    return registry.Done(output)
