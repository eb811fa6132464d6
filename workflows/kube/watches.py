"""Watches of the management cluster's collections, and listing its CAPI Clusters.

`watch` streams one watch request's events and raises the `K8sError` each way it can end
badly, so that `workflows.controllers.listwatch` can do what client-go's reflector does
with each: `Gone` (410, the resourceVersion was compacted: list again), an error the
API server answered (an HTTP status, or an ERROR event in the stream: list again, unless
it is 429), or no answer at all (`Unreachable` without a status: watch again from the
same resourceVersion). Calls go through `k8s` (timeouts, error mapping, credentials).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from workflows.kube import k8s


def watch(
    api: k8s.ApiClient,
    path: str,
    *,
    resource_version: str,
    timeout_seconds: int,
    what: str,
) -> Iterator[dict[str, Any]]:
    """The events of one watch of the collection `path` from `resource_version`.

    Ends when the server ends the watch (after `timeout_seconds`). An ERROR event becomes
    the error of its Status (kube-apiserver sends one, rather than an HTTP error, for what
    goes wrong once the watch is admitted: apiserver storage/cacher/cacher.go Watch,
    `newErrWatcher`), with its reason, causes and retryAfterSeconds.
    """
    query = [
        ("watch", "true"),
        ("resourceVersion", resource_version),
        ("timeoutSeconds", str(timeout_seconds)),
        ("allowWatchBookmarks", "true"),
    ]
    serialized = api.param_serialize(
        method="GET",
        resource_path=path,
        query_params=query,
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    # The read timeout outlasts the server's own end of the watch.
    timeout = (k8s.REQUEST_TIMEOUT[0], timeout_seconds + k8s.REQUEST_TIMEOUT[1])
    with k8s.translated(what):
        response = api.call_api(*serialized, _request_timeout=timeout)
        raw = response.response
        try:
            if response.status >= 300:
                status = int(response.status)
                raise k8s.answered(status, raw.data, f"{what}: API server answered {status}")
            buffer = b""
            for chunk in raw.stream(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event: dict[str, Any] = json.loads(line)
                    if event.get("type") == "ERROR":
                        obj = event.get("object") or {}
                        status = int(obj.get("code") or 500)
                        raise k8s.answered(status, obj, f"{what}: API server answered {status}")
                    yield event
        finally:
            raw.release_conn()


def list_clusters(api: k8s.ApiClient) -> tuple[str, dict[str, Any]]:
    """Every CAPI Cluster, at the newest version served: (collection path, the List)."""
    for version in k8s.CLUSTER_VERSIONS:
        path = f"/apis/{k8s.CLUSTER_GROUP}/{version}/clusters"
        try:
            found: dict[str, Any] = k8s.request(api, "GET", path, what="Clusters")
            return path, found
        except k8s.NotFound:
            if version == k8s.CLUSTER_VERSIONS[-1]:
                raise
    raise AssertionError("unreachable")  # pragma: no cover
