"""What the Kubernetes API emulator shows of its store: lists, watches, discovery, pod logs.

`tests.support.kube` serves these answers; `kube_store` holds the objects they are made of.
Discovery lists a CustomResourceDefinition's resource only once it is Established, as
apiextensions-apiserver's customresource_discovery_controller.go does. The log of a Pod the
emulator's kubelet runs follows the kubelet's `validateContainerLogStatus`
(pkg/kubelet/kubelet_pods.go): a container that never ran has no log, and asking for it is
a 400 whose message says why, as kube-apiserver passes the kubelet's answer on
(apiserver pkg/registry/generic/rest/response_checker.go: 400 becomes BadRequest).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tests.support.kube_resources import Resource
from tests.support.kube_semantics import (
    JSON,
    ApiError,
    field_selector_matches,
    label_selector_matches,
)
from tests.support.kube_store import Change, Store


def pod_log(store: Store, res: Resource, ns: str, name: str, query: Mapping[str, str]) -> str:
    """A container's log (tailLines, limitBytes); a pod of several needs its container named."""
    container = query.get("container", "")
    pod = store.existing(res, ns, name)
    names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
    if not container and len(names) > 1:
        raise ApiError(
            400,
            f"a container name must be specified for pod {name}, "
            f"choose one of: [{' '.join(names)}]",
        )
    if container and container not in names:
        raise ApiError(400, f"container {container} is not valid for pod {name}")
    if refused := _no_log(pod, container or (names[0] if names else "")):
        raise ApiError(400, refused)
    found = store.logs.get((ns, name, container or (names[0] if names else "")))
    if found is None and len(names) <= 1:
        found = store.logs.get((ns, name, ""))
    text = found or ""
    if tail := query.get("tailLines"):
        text = "".join(text.splitlines(keepends=True)[-int(tail) :])
    if limit := query.get("limitBytes"):
        text = text.encode()[: int(limit)].decode(errors="ignore")
    return text


def _no_log(pod: JSON, container: str) -> str:
    """Why the kubelet has no log of `container` ("" when it has one); only for Pods the
    emulator's kubelet reports (a test that plays a Pod sets its log itself)."""
    name = pod["metadata"]["name"]
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    found = next((s for s in statuses if s.get("name") == container), None)
    if not (pod.get("spec") or {}).get("nodeName") or found is None:
        return ""
    state, last = found.get("state") or {}, (found.get("lastState") or {}).get("terminated")
    terminated, waiting = state.get("terminated"), state.get("waiting")
    if "running" in state or (terminated and terminated.get("containerID")):
        return ""
    if (terminated or waiting) and last and last.get("containerID"):
        return ""
    if terminated:
        return f'container "{container}" in pod "{name}" is terminated'
    reason = (waiting or {}).get("reason", "")
    why = {
        "ErrImagePull": "image can't be pulled",
        "ImagePullBackOff": "trying and failing to pull image",
    }.get(reason, reason)
    return f'container "{container}" in pod "{name}" is waiting to start: {why}'


def matcher(ns: str, query: Any) -> Callable[[JSON], bool]:
    labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
    # Parse once now, so a bad selector answers 400 before anything streams.
    label_selector_matches(labels, {})
    field_selector_matches(fields, {})

    def matches(obj: JSON) -> bool:
        meta = obj.get("metadata") or {}
        return (
            ns in ("", meta.get("namespace"))
            and label_selector_matches(labels, meta.get("labels") or {})
            and field_selector_matches(fields, obj)
        )

    return matches


def list_answer(store: Store, res: Resource, ns: str, query: Any) -> JSON:
    matches = matcher(ns, query)
    items = [
        store.present(res, obj)
        for key, obj in sorted(store.objects.items())
        if key[:2] == (res.group, res.plural) and matches(obj)
    ]
    return {
        "apiVersion": res.api_version,
        "kind": f"{res.kind}List",
        "metadata": {"resourceVersion": str(store.rv)},
        "items": items,
    }


def backlog(
    store: Store, res: Resource, since: str, matches: Callable[[JSON], bool]
) -> Iterator[JSON]:
    """What a new watch sends first: current objects, or the changes after `since`."""
    if since in ("", "0"):
        for key, obj in sorted(store.objects.items()):
            if key[:2] == (res.group, res.plural) and matches(obj):
                yield {"type": "ADDED", "object": store.present(res, obj)}
        return
    if not since.isdigit():
        raise ApiError(400, f"invalid resourceVersion {since!r}")
    if int(since) < store.compacted_rv:
        gone = ApiError(410, f"too old resource version: {since} ({store.compacted_rv})")
        yield {"type": "ERROR", "object": gone.status()}
        return
    for change in store.history:
        if change.rv > int(since):
            yield from event(store, res, change, matches)


def event(
    store: Store, res: Resource, change: Change, matches: Callable[[JSON], bool]
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
        yield {"type": kind, "object": store.present(res, change.new)}


def _discoverable(store: Store, res: Resource) -> bool:
    # customresource_discovery_controller.go lists a CRD's resource once it is Established.
    return not res.crd or store.crd_condition(res.crd) == "Established"


def discovery(store: Store, parts: list[str]) -> JSON:
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    groups: dict[str, list[str]] = {}
    for (group, version, _), res in store.resources.items():
        if group and _discoverable(store, res) and version not in groups.setdefault(group, []):
            groups[group].append(version)
    groups = {group: versions for group, versions in groups.items() if versions}

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
    served = [
        r
        for r in store.resources.values()
        if (r.group, r.version) == (group, version) and _discoverable(store, r)
    ]
    if not served:
        raise ApiError(404, "the server could not find the requested resource")
    resources: list[JSON] = []
    for res in served:
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        if res.crd and store.crd_terminating(res.crd):
            # customresource_discovery_controller.go: a terminating CRD's kind takes no writes.
            verbs = ["delete", "deletecollection", "get", "list", "watch"]
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
