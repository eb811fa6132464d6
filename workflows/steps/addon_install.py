"""`addon_install`: applies add-ons to the workload cluster and waits until they roll out.

Add-ons are manifests (given inline, or as YAML in a ConfigMap of the management cluster)
applied with server-side apply under the field manager `hooksvc`, which creates or updates
and so is safe to repeat; or Helm charts installed through the `helm` CLI (see
`workflows.steps.helm`).

Manifests go in stages, as Flux's kustomize-controller applies them (fluxcd/pkg
ssa/manager_apply.go, `ApplyAllStaged`): CustomResourceDefinitions and Namespaces first,
then a wait until each CRD is Established and its kinds are served (discovery) and each
Namespace is Active; then the rest, in Helm's install order (helm v4.1.4 pkg/release/v1/
util/kind_sorter.go, `InstallOrder`: PriorityClass first, webhook configurations last;
document order within a kind). A kind not served yet, or
a namespace not there yet or still terminating from an earlier removal, is a condition to
wait out (polls with a backoff, not a failure); so is a CRD still terminating from an
earlier removal (apiextensions-apiserver crd_finalizer.go deletes every instance, then the
CRD: what is applied meanwhile would go with it), which is applied anew once it is gone. A
conflict on apply is retried. Then the charts, then the rollout waits, which follow
`kubectl rollout status` (`rollout`).

The output is the inventory of what was applied, in that order (each object, and for a
chart the release followed by its objects), which `addon_remove` deletes in reverse.
"""

from __future__ import annotations

from typing import Any

import yaml

from workflows import errors
from workflows.kube import k8s, manifests
from workflows.steps import helm, objects, registry, rollout

JSON = dict[str, Any]
CRD_API = "apiextensions.k8s.io/v1"
#: Applied and waited for before anything else (Flux's stage one).
DEFINITIONS = {("apiextensions.k8s.io", "CustomResourceDefinition"), ("", "Namespace")}
#: helm v4.1.4 pkg/release/v1/util/kind_sorter.go InstallOrder (v3.17.3's
#: pkg/releaseutil/kind_sorter.go without the two webhook configurations); other kinds go
#: last. docs/upstream.md records it; tests/test_upstream_doc.py holds this copy to the record.
INSTALL_ORDER = (
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
    "PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
    "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
    "CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
    "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
    "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
    "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
)  # fmt: skip
#: Longest wait between two looks at something not there yet (the backoff's cap).
MAX_WAIT_SECONDS = 30


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
            elif key == "adopt":
                if not isinstance(item, bool):
                    raise registry.ParamError("", f"item {index}: adopt must be a boolean")
            elif key not in _CHART_FIELDS or not isinstance(item, str):
                raise registry.ParamError("", f"item {index}: unknown or invalid field {key}")
        chart.setdefault("namespace", "default")
    return value


#: The shapes `_check_config_map` and `_check_charts` accept, as the CRDs publish them.
_CONFIG_MAP_REF = {key: registry.Param(str, required=True) for key in ("namespace", "name", "key")}
_CHART = registry.Param(
    dict,
    fields={
        **{key: registry.Param(str, required=key in ("release", "chart")) for key in _CHART_FIELDS},
        "values": registry.Param(dict),
        #: Take over a release someone else installed (else the step refuses it).
        "adopt": registry.Param(bool),
    },
)


def _check(params: dict[str, Any], hook: str) -> None:
    if not (params.get("manifests") or params.get("configMapRef") or params.get("charts")):
        raise registry.ParamError("manifests", "give manifests, configMapRef or charts")


PARAMS = {
    "manifests": registry.Param(list, check=_check_manifests, items=registry.Param(dict)),
    #: A ConfigMap of the management cluster whose `key` holds the manifests as YAML.
    "configMapRef": registry.Param(dict, check=_check_config_map, fields=_CONFIG_MAP_REF),
    #: Helm charts: release, chart (name, path or oci:// reference), repo, version, values,
    #: adopt (take over a release installed by someone else).
    "charts": registry.Param(list, check=_check_charts, items=_CHART),
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


def _group_kind(doc: JSON) -> tuple[str, str]:
    return str(doc["apiVersion"]).rpartition("/")[0], str(doc["kind"])


def _staged(docs: list[JSON]) -> tuple[list[JSON], list[JSON]]:
    """Definitions (document order), then the rest in Helm's install order."""
    first = [d for d in docs if _group_kind(d) in DEFINITIONS]
    rest = [d for d in docs if _group_kind(d) not in DEFINITIONS]
    order = {kind: index for index, kind in enumerate(INSTALL_ORDER)}
    rest.sort(key=lambda d: order.get(d["kind"], len(order)))  # stable: document order kept
    return first, rest


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
        if not manifests.resource(api, doc["apiVersion"], doc["kind"])[1]:
            entry["namespace"] = None
    except k8s.NotServed:
        pass  # not served (any more): its scope cannot be told; the namespace does no harm
    if "helm.sh/resource-policy" in (meta.get("annotations") or {}):
        # helm's uninstall leaves it, so removal does not wait for it: "keep" (trimmed,
        # any case) is kept, and any other value drops it from the deletion too (helm
        # v3.17 and v4 pkg/action/resource_policy.go `filterManifestsToKeep`).
        entry["keep"] = True
    return entry


class _NotYet(Exception):
    """Something the next manifest needs is not there yet; `message` says what."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _apply(ctx: registry.StepContext, api: k8s.ApiClient, doc: JSON) -> JSON:
    """Apply one manifest; what is not ready yet becomes `_NotYet`."""
    meta = doc.get("metadata") or {}
    ns = meta.get("namespace") or ctx.params["namespace"]
    what = f"{doc['kind']} {meta['name']}"
    try:
        return _entry(manifests.apply(api, doc, namespace=ns))
    except k8s.NotServed:
        served = f"{doc['apiVersion']} {doc['kind']}"
        raise _NotYet(f"waiting for the API server to serve {served}") from None
    except k8s.NotFound:
        # Server-side apply creates what is missing, so a 404 is the namespace (or a kind
        # whose CRD went away since discovery was read).
        raise _NotYet(f"waiting for namespace {ns} to exist to apply {what}") from None
    except k8s.Forbidden as exc:
        if "NamespaceTerminating" not in exc.causes:
            raise
        raise _NotYet(f"waiting for namespace {ns} to finish terminating to apply {what}") from None


def _definition_ready(api: k8s.ApiClient, doc: JSON) -> str:
    """ "" when the CRD is Established and its kinds are served, or the Namespace Active."""
    name = doc["metadata"]["name"]
    if doc["kind"] == "Namespace":
        found = objects.get(api, objects.path("v1", "namespaces", name=name), what=name)
        if found is None:
            found = manifests.apply(api, doc)  # gone meanwhile (an earlier removal's): again
        if (found.get("status") or {}).get("phase") == "Terminating":
            return f"waiting for Namespace {name} to finish terminating"
        return ""
    path = objects.path(CRD_API, "customresourcedefinitions", name=name)
    crd = objects.get(api, path, what=f"CustomResourceDefinition {name}")
    if crd is None:
        crd = manifests.apply(api, doc)  # gone meanwhile (an earlier removal's): again
    if (crd.get("metadata") or {}).get("deletionTimestamp"):
        # An earlier removal's: still Established, but its finalizer deletes every instance
        # and then the CRD itself, so what is applied now would go with it.
        return f"waiting for CustomResourceDefinition {name} to finish terminating"
    conditions = {c.get("type"): c for c in (crd.get("status") or {}).get("conditions") or []}
    names = conditions.get("NamesAccepted") or {}
    if names.get("status") == "False":
        # Another CRD of the group holds the names: waiting cannot help.
        raise errors.PermanentError(
            f"CustomResourceDefinition {name}: names not accepted ({names.get('reason')})"
        )
    if (conditions.get("Established") or {}).get("status") != "True":
        return f"waiting for CustomResourceDefinition {name} to be established"
    spec = crd.get("spec") or {}
    kind = (spec.get("names") or {}).get("kind", "")
    for version in spec.get("versions") or []:
        if version.get("served", True):
            api_version = f"{spec.get('group')}/{version['name']}"
            try:
                manifests.resource(api, api_version, kind)
            except k8s.NotServed:
                return f"waiting for the API server to serve {api_version} {kind}"
    return ""


def _install(ctx: registry.StepContext, api: k8s.ApiClient) -> str:
    """Apply what is left, in order; "" when all is applied, else what it waits for."""
    memo = ctx.memo
    if "docs" not in memo:
        given = list(ctx.params.get("manifests") or [])
        if ctx.params.get("configMapRef"):
            given += _config_map_manifests(ctx.params["configMapRef"])
        first, rest = _staged(given)
        memo.update(docs=first + rest, definitions=len(first), applied=0, inventory=[])
    docs: list[JSON] = memo["docs"]
    definitions = int(memo["definitions"])
    while (index := int(memo["applied"])) < len(docs) or not memo.get("defined"):
        if index == definitions and not memo.get("defined"):
            for doc in docs[:definitions]:
                waiting = _definition_ready(api, doc)
                if waiting:
                    return waiting
            memo["defined"] = True
            continue
        memo["inventory"].append(_apply(ctx, api, docs[index]))
        memo["applied"] = index + 1
        memo.pop("backoff", None)
    charts = ctx.params.get("charts") or []
    while int(memo.get("charts", 0)) < len(charts):
        chart = charts[int(memo.get("charts", 0))]
        # The release first: removal goes in reverse, and uninstalling it takes its objects.
        entries: list[JSON] = [{"helmRelease": chart["release"], "namespace": chart["namespace"]}]
        entries += [_chart_entry(api, doc, chart) for doc in helm.install(ctx, chart)]
        memo["inventory"] += entries
        memo["charts"] = int(memo.get("charts", 0)) + 1
        memo.pop("backoff", None)
    return ""


def _waiting_poll(ctx: registry.StepContext, message: str, output: JSON) -> registry.Poll:
    """Poll again with a doubling wait: 1 s, 2 s, ... up to MAX_WAIT_SECONDS."""
    backoff = int(ctx.memo.get("backoff", 0))
    ctx.memo["backoff"] = backoff + 1
    return registry.Poll(after=min(2**backoff, MAX_WAIT_SECONDS), message=message, output=output)


@registry.step_type(
    "addon_install", params=PARAMS, check=_check, call_timeout_seconds=helm.call_bound()
)
def addon_install(ctx: registry.StepContext) -> registry.Outcome:
    """Applies add-on manifests and charts, then waits until they are rolled out."""
    api = objects.workload(ctx)
    if not ctx.memo.get("installed"):
        try:
            waiting = _install(ctx, api)
        except (_NotYet, helm.NotReady) as exc:
            waiting = exc.message
        output = {"inventory": ctx.memo["inventory"]}
        if waiting:
            return _waiting_poll(ctx, waiting, output)
        ctx.memo["installed"] = True
    output = {"inventory": ctx.memo["inventory"]}
    if not ctx.params["waitForRollout"]:
        return registry.Done(output)
    return _rollout(ctx, api, output)


def _rollout(ctx: registry.StepContext, api: k8s.ApiClient, output: JSON) -> registry.Outcome:
    workloads = [e for e in ctx.memo["inventory"] if e.get("kind") in rollout.KINDS]
    waiting, skipped = [], []
    for entry in workloads:
        what = f"{entry['kind']} {entry['namespace']}/{entry['name']}"
        found = objects.get(api, objects.inventory_path(api, entry), what=what)
        if found is None:
            waiting.append(what)
            continue
        state = rollout.status(found)
        if state.failed:
            raise errors.PermanentError(f"{what} did not roll out: {state.failed}", output=output)
        if state.skipped:
            skipped.append({**entry, "reason": f"{state.skipped}: not waited for"})
        elif not state.done:
            waiting.append(what)
    if skipped:
        output = {**output, "notWaitedFor": skipped}
    if waiting:
        message = f"waiting for {len(waiting)} of {len(workloads)} to roll out: {waiting[0]}"
        return registry.Poll(after=ctx.params["pollSeconds"], message=message, output=output)
    return registry.Done(output)
