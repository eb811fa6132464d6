"""What the Kubernetes step types share: the cluster a step works on, and objects by REST path.

Steps name what they create with `ctx.object_name()` and look for it before creating it
(`ensure`: a 409 on create means an earlier attempt made it, so the existing object is
read). Every call goes through `workflows.kube.k8s`, which owns timeouts and the error family:
an unreachable API server is a `TemporaryError`, retried by the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workflows import clock, errors
from workflows.kube import k8s, manifests
from workflows.steps import registry

JSON = dict[str, Any]

#: A waiting step fails itself this long before its timeout, to say what it waited for.
DEADLINE_MARGIN_SECONDS = 3.0

#: Labels on everything the steps create, so an operator can find it (`kubectl get -l`).
RUN_LABEL = "hooksvc.io/run"
STEP_LABEL = "hooksvc.io/step"


def labels(ctx: registry.StepContext) -> dict[str, str]:
    return {RUN_LABEL: str(ctx.run_id), STEP_LABEL: ctx.step_name}


def workload(ctx: registry.StepContext) -> k8s.ApiClient:
    """The run's workload cluster, through its `<cluster>-kubeconfig` Secret."""
    return k8s.workload_api(str(ctx.cluster.get("namespace")), str(ctx.cluster.get("name")))


def cluster_api(ctx: registry.StepContext, which: str) -> k8s.ApiClient:
    """`management` or `workload`."""
    return k8s.management_api() if which == "management" else workload(ctx)


def path(api_version: str, plural: str, namespace: str | None = None, name: str = "") -> str:
    """`/api/v1/namespaces/ns/pods/name`, `/apis/batch/v1/jobs`, ..."""
    prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{prefix}{scope}/{plural}" + (f"/{name}" if name else "")


def get(api: k8s.ApiClient, object_path: str, *, what: str) -> JSON | None:
    """The object at `object_path`, or None when it does not exist."""
    try:
        found: JSON = k8s.request(api, "GET", object_path, what=what)
    except k8s.NotFound:
        return None
    return found


def ensure(api: k8s.ApiClient, collection_path: str, body: JSON, *, what: str) -> JSON:
    """Create `body` in `collection_path` unless it exists; return the object either way."""
    try:
        created: JSON = k8s.request(api, "POST", collection_path, body=body, what=what)
    except k8s.Conflict:
        existing = get(api, f"{collection_path}/{body['metadata']['name']}", what=what)
        if existing is None:  # deleted between the two calls: the next attempt creates it
            raise k8s.Unreachable(f"{what}: changed concurrently") from None
        return existing
    return created


def delete(api: k8s.ApiClient, object_path: str, *, what: str) -> bool:
    """Delete the object (its dependents in the background); False when already gone."""
    query = [("propagationPolicy", "Background")]
    try:
        k8s.request(api, "DELETE", object_path, query=query, what=what)
    except k8s.NotFound:
        return False
    return True


def items(
    api: k8s.ApiClient,
    collection_path: str,
    *,
    what: str,
    selector: Mapping[str, str] | None = None,
) -> list[JSON]:
    """The objects of a collection, matching `selector` (labels) if given, by namespace/name."""
    query = [("labelSelector", label_selector(selector))] if selector else []
    found: list[JSON] = k8s.request(api, "GET", collection_path, query=query, what=what)["items"]
    return sorted(found, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))


def label_selector(match_labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(match_labels.items()))


def check_string_map(value: dict[str, Any]) -> dict[str, str]:
    """A `Param.check` for maps of strings (labels, env)."""
    for key, item in value.items():
        if not isinstance(item, str):
            raise registry.ParamError(str(key), "must be a string")
    return value


#: The shape of the items of `check_strings` lists and the values of `check_string_map` maps.
STRING = registry.Param(str)


def check_strings(value: list[Any]) -> list[str]:
    """A `Param.check` for lists of strings."""
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise registry.ParamError("", f"item {index} must be a non-empty string")
    return value


def tail(text: str, max_chars: int) -> str:
    """The end of `text`, at most `max_chars` long, cut at a line start when possible."""
    if len(text) <= max_chars:
        return text
    cut = text[-max_chars:]
    newline = cut.find("\n")
    return cut[newline + 1 :] if 0 <= newline < len(cut) - 1 else cut


def inventory_path(api: k8s.ApiClient, entry: Mapping[str, Any]) -> str:
    """The REST path of an inventory entry {apiVersion, kind, namespace, name}."""
    manifest = {
        "apiVersion": entry["apiVersion"],
        "kind": entry["kind"],
        "metadata": {"name": entry["name"]},
    }
    return manifests.object_path(api, manifest, entry.get("namespace"))


def wait_or_fail(
    ctx: registry.StepContext,
    *,
    after: float,
    message: str,
    output: Mapping[str, Any],
    failure: str,
) -> registry.Poll:
    """Poll again after `after` seconds; when the step's timeout comes first, look once more
    just before it, and then fail with `failure` (a fixed text: it reaches CAPI)."""
    if ctx.deadline is not None:
        left = (ctx.deadline - clock.now()).total_seconds()
        if left <= DEADLINE_MARGIN_SECONDS:
            raise errors.PermanentError(failure, output=output)
        after = min(after, left - DEADLINE_MARGIN_SECONDS)
    return registry.Poll(after=after, message=message, output=output)
