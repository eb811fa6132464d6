"""Server-side apply and deletion of manifests of any kind, found through API discovery.

Add-on steps hold manifests (dicts with apiVersion, kind, metadata); the typed client
APIs need a method per kind, so this module finds each kind's plural and scope through
discovery (`/api/v1`, `/apis/<group>/<version>`), cached per client, and makes the REST
call through `k8s.request`, which owns timeouts and errors.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from workflows.kube import k8s

Manifest = dict[str, Any]

_lock = threading.Lock()
_discovery: weakref.WeakKeyDictionary[k8s.ApiClient, dict[str, list[dict[str, Any]]]] = (
    weakref.WeakKeyDictionary()
)


def _prefix(api_version: str) -> str:
    return f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"


def resource(
    api: k8s.ApiClient, api_version: str, kind: str, *, fresh: bool = False
) -> tuple[str, bool]:
    """The plural of `kind` and whether it is namespaced, from discovery.

    Raises `k8s.NotServed` when the API server does not list it: a CRD not established
    yet, or discovery behind (a caller waits for it), or no such kind at all. The cache is
    refreshed on a miss; `fresh` asks the server even on a hit (a kind may have gone).
    """
    for attempt in range(int(fresh), 2):
        with _lock:
            served = _discovery.setdefault(api, {}).get(api_version)
        if served is None or attempt:
            # Refreshed on a miss: an add-on may have just installed the CRD.
            try:
                found = k8s.request(api, "GET", _prefix(api_version), what=api_version)
            except k8s.NotFound:
                raise k8s.NotServed(f"{api_version} is not served") from None
            served = found["resources"]
            with _lock:
                _discovery.setdefault(api, {})[api_version] = served
        for entry in served:
            if entry["kind"] == kind and "/" not in entry["name"]:
                return str(entry["name"]), bool(entry["namespaced"])
    raise k8s.NotServed(f"{api_version} {kind} is not served")


def object_path(api: k8s.ApiClient, manifest: Manifest, namespace: str | None = None) -> str:
    """The REST path of the object `manifest` describes (plural and scope from discovery)."""
    meta = manifest.get("metadata") or {}
    plural, namespaced = resource(api, manifest["apiVersion"], manifest["kind"])
    ns = namespace or meta.get("namespace") or "default"
    scope = f"/namespaces/{ns}" if namespaced else ""
    return f"{_prefix(manifest['apiVersion'])}{scope}/{plural}/{meta['name']}"


def collection_path(api: k8s.ApiClient, api_version: str, kind: str) -> str:
    """The path listing every object of `kind`, in all namespaces."""
    plural, _ = resource(api, api_version, kind)
    return f"{_prefix(api_version)}/{plural}"


def apply(
    api: k8s.ApiClient,
    manifest: Manifest,
    *,
    field_manager: str = "hooksvc",
    force: bool = True,
    namespace: str | None = None,
) -> Manifest:
    """Server-side apply of any manifest; creates it when missing. Returns the object.

    A conflict (another writer in between, or another field manager without `force`) is
    a `k8s.TryAgain`; a 404 (its namespace not there yet) and a 403 (e.g. its namespace
    terminating) are the caller's to judge.
    """
    query = [("fieldManager", field_manager)] + ([("force", "true")] if force else [])
    path = object_path(api, manifest, namespace)
    try:
        applied: Manifest = k8s.request(
            api, "PATCH", path, query=query, body=manifest,
            content_type="application/apply-patch+yaml", what=f"apply {path}",
        )  # fmt: skip
    except k8s.Conflict as exc:
        raise k8s.TryAgain(f"apply {path}: changed concurrently") from exc
    return applied


def delete(api: k8s.ApiClient, manifest: Manifest, *, namespace: str | None = None) -> bool:
    """Delete the object `manifest` describes; False when it was already gone."""
    path = object_path(api, manifest, namespace)
    try:
        k8s.request(api, "DELETE", path, what=f"delete {path}")
    except k8s.NotFound:
        return False
    return True
