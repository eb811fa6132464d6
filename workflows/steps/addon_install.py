"""`addon_install`: applies add-ons to the workload cluster and waits until they roll out.

Add-ons are manifests (given inline, or as YAML in a ConfigMap of the management cluster)
applied with server-side apply under the field manager `hooksvc`, which creates or updates
and so is safe to repeat; or Helm charts installed through the `helm` CLI (see
`workflows.steps.helm`). The step is done when every Deployment, StatefulSet and DaemonSet
it applied (or a chart's release holds) is rolled out, and its output records the inventory
of what it applied: each object, and for a chart the release followed by its objects,
which `addon_remove` deletes later.
"""

from __future__ import annotations

from typing import Any

import yaml

from workflows import errors, k8s, manifests
from workflows.steps import helm, objects, registry

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
JSON = dict[str, Any]


def _check_manifests(value: list[Any]) -> list[Any]:
    for index, doc in enumerate(value):
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        if not (
            isinstance(doc, dict)
            and isinstance(doc.get("apiVersion"), str)
            and isinstance(doc.get("kind"), str)
            and isinstance(meta, dict)
            and isinstance(meta.get("name"), str)
        ):
            raise registry.ParamError(
                "", f"item {index} must be a manifest with apiVersion, kind and metadata.name"
            )
    return value


def _check_config_map(value: dict[str, Any]) -> dict[str, Any]:
    for key in ("namespace", "name", "key"):
        if not isinstance(value.get(key), str) or not value[key]:
            raise registry.ParamError(key, "is required")
    unknown = sorted(set(value) - {"namespace", "name", "key"})
    if unknown:
        raise registry.ParamError(unknown[0], "unknown field")
    return value


_CHART_FIELDS = {"release": str, "chart": str, "repo": str, "version": str, "namespace": str}


def _check_charts(value: list[Any]) -> list[Any]:
    for index, chart in enumerate(value):
        if not isinstance(chart, dict) or not chart.get("release") or not chart.get("chart"):
            raise registry.ParamError("", f"item {index} needs release and chart")
        for key, item in chart.items():
            if key == "values":
                if not isinstance(item, dict):
                    raise registry.ParamError("", f"item {index}: values must be an object")
            elif key not in _CHART_FIELDS or not isinstance(item, str):
                raise registry.ParamError("", f"item {index}: unknown or invalid field {key}")
        chart.setdefault("namespace", "default")
    return value


def _check(params: dict[str, Any], hook: str) -> None:
    if not (params.get("manifests") or params.get("configMapRef") or params.get("charts")):
        raise registry.ParamError("manifests", "give manifests, configMapRef or charts")


PARAMS = {
    "manifests": registry.Param(list, check=_check_manifests),
    #: A ConfigMap of the management cluster whose `key` holds the manifests as YAML.
    "configMapRef": registry.Param(dict, check=_check_config_map),
    #: Helm charts: release, chart (name, path or oci:// reference), repo, version, values.
    "charts": registry.Param(list, check=_check_charts),
    #: For namespaced manifests that name none.
    "namespace": registry.Param(str, default="default"),
    "waitForRollout": registry.Param(bool, default=True),
    "pollSeconds": registry.Param((int, float), default=10, minimum=1),
}


def _config_map_manifests(ref: dict[str, str]) -> list[manifests.Manifest]:
    ns, name, key = ref["namespace"], ref["name"], ref["key"]
    what = f"ConfigMap {ns}/{name}"
    found = objects.get(k8s.management_api(), objects.path("v1", "configmaps", ns, name), what=what)
    if found is None:
        # It may be on its way (GitOps); the engine retries.
        raise errors.TemporaryError(f"{what} not found")
    text = (found.get("data") or {}).get(key)
    if text is None:
        raise errors.PermanentError(f"{what} has no key {key}")
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
        return _check_manifests(docs)
    except (yaml.YAMLError, registry.ParamError):
        raise errors.PermanentError(f"{what} key {key} does not hold valid manifests") from None


def _entry(obj: manifests.Manifest) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "namespace": meta.get("namespace"),
        "name": meta["name"],
    }


def _chart_entry(api: k8s.ApiClient, doc: manifests.Manifest, chart: dict[str, Any]) -> JSON:
    """An inventory entry for an object of a release; cluster-scoped ones get no namespace."""
    meta = doc.setdefault("metadata", {})
    meta["namespace"] = meta.get("namespace") or chart["namespace"]
    entry: JSON = {**_entry(doc), "helmRelease": chart["release"]}
    try:
        # .../namespaces/<ns>/<plural>/<name> when namespaced, .../<plural>/<name> when not.
        path = manifests.object_path(api, doc)
        if path.split(f"/{doc['apiVersion']}/", 1)[1].count("/") == 1:
            entry["namespace"] = None
    except k8s.NotFound:
        pass  # not served (any more): its scope cannot be told; the namespace does no harm
    if (meta.get("annotations") or {}).get("helm.sh/resource-policy") == "keep":
        entry["keep"] = True  # helm leaves it on uninstall, so removal does not wait for it
    return entry


def _apply(ctx: registry.StepContext, api: k8s.ApiClient) -> None:
    docs = list(ctx.params.get("manifests") or [])
    if ctx.params.get("configMapRef"):
        docs += _config_map_manifests(ctx.params["configMapRef"])
    inventory = []
    for doc in docs:
        ns = (doc.get("metadata") or {}).get("namespace") or ctx.params["namespace"]
        applied = manifests.apply(api, doc, namespace=ns)
        inventory.append(_entry(applied))
    for chart in ctx.params.get("charts") or []:
        # The release first: removal goes in reverse, and uninstalling it takes its objects.
        inventory.append({"helmRelease": chart["release"], "namespace": chart["namespace"]})
        inventory += [_chart_entry(api, doc, chart) for doc in helm.install(ctx, chart)]
    rollout = [e for e in inventory if e.get("kind") in WORKLOAD_KINDS]
    ctx.memo["inventory"], ctx.memo["rollout"] = inventory, rollout


def rolled_out(obj: manifests.Manifest) -> bool:
    """True when the controller saw the latest spec and every replica is updated and available."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation", 0)
    if int(status.get("observedGeneration") or 0) < int(generation or 0):
        return False
    if obj["kind"] == "DaemonSet":
        desired = int(status.get("desiredNumberScheduled") or 0)
        return bool(
            int(status.get("updatedNumberScheduled") or 0) == desired
            and int(status.get("numberAvailable") or 0) == desired
        )
    replicas = int(spec.get("replicas", 1))
    ready = "availableReplicas" if obj["kind"] == "Deployment" else "readyReplicas"
    return bool(
        int(status.get("updatedReplicas") or 0) == replicas
        and int(status.get(ready) or 0) == replicas
        # Old replicas still running: a Deployment's rollout is not over.
        and int(status.get("replicas") or 0) <= replicas
    )


@registry.step_type("addon_install", params=PARAMS, check=_check)
def addon_install(ctx: registry.StepContext) -> registry.Outcome:
    """Applies add-on manifests and charts, then waits until they are rolled out."""
    api = None
    if "inventory" not in ctx.memo:
        api = objects.workload(ctx)
        _apply(ctx, api)
    output = {"inventory": ctx.memo["inventory"]}
    if not ctx.params["waitForRollout"]:
        return registry.Done(output)
    api = api or objects.workload(ctx)
    waiting = []
    for entry in ctx.memo["rollout"]:
        what = f"{entry['kind']} {entry['namespace']}/{entry['name']}"
        found = objects.get(api, objects.inventory_path(api, entry), what=what)
        if found is None or not rolled_out(found):
            waiting.append(what)
    if waiting:
        message = (
            f"waiting for {len(waiting)} of {len(ctx.memo['rollout'])} to roll out: {waiting[0]}"
        )
        return registry.Poll(after=ctx.params["pollSeconds"], message=message, output=output)
    return registry.Done(output)
