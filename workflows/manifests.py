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

from workflows import k8s

Manifest = dict[str, Any]

_lock = threading.Lock()
_discovery: weakref.WeakKeyDictionary[k8s.ApiClient, dict[str, list[dict[str, Any]]]] = (
    weakref.WeakKeyDictionary()
)


def _prefix(api_version: str) -> str:
    return f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"


def object_path(api: k8s.ApiClient, manifest: Manifest, namespace: str | None = None) -> str:
    """The REST path of the object `manifest` describes (plural and scope from discovery)."""
    api_version, kind = manifest["apiVersion"], manifest["kind"]
    meta = manifest.get("metadata") or {}
    for attempt in range(2):
        with _lock:
            served = _discovery.setdefault(api, {}).get(api_version)
        if served is None or attempt:
            # Refreshed on a miss: an add-on may have just installed the CRD.
            served = k8s.request(api, "GET", _prefix(api_version), what=api_version)["resources"]
            with _lock:
                _discovery.setdefault(api, {})[api_version] = served
        for resource in served:
            if resource["kind"] == kind and "/" not in resource["name"]:
                ns = namespace or meta.get("namespace") or "default"
                scope = f"/namespaces/{ns}" if resource["namespaced"] else ""
                return f"{_prefix(api_version)}{scope}/{resource['name']}/{meta['name']}"
    raise k8s.NotFound(f"{api_version} {kind} is not served")


def apply(
    api: k8s.ApiClient,
    manifest: Manifest,
    *,
    field_manager: str = "hooksvc",
    force: bool = True,
    namespace: str | None = None,
) -> Manifest:
    """Server-side apply of any manifest; creates it when missing. Returns the object."""
    query = [("fieldManager", field_manager)] + ([("force", "true")] if force else [])
    path = object_path(api, manifest, namespace)
    applied: Manifest = k8s.request(
        api, "PATCH", path, query=query, body=manifest,
        content_type="application/apply-patch+yaml", what=f"apply {path}",
    )  # fmt: skip
    return applied


def delete(api: k8s.ApiClient, manifest: Manifest, *, namespace: str | None = None) -> bool:
    """Delete the object `manifest` describes; False when it was already gone."""
    path = object_path(api, manifest, namespace)
    try:
        k8s.request(api, "DELETE", path, what=f"delete {path}")
    except k8s.NotFound:
        return False
    return True
