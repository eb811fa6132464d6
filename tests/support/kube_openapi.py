"""The emulator's `/openapi/v3`: the index and one document per served group/version.

Why it exists: helm (through kubectl's client libraries) validates a chart's objects before
sending them. It first asks `/openapi/v3` whether the server validates fields itself: when
the group/version's document has a PATCH operation for the kind that takes the
`fieldValidation` query parameter (kube-apiserver >= 1.27), the client leaves validation to
the server; otherwise it downloads `/openapi/v2` and validates against full schemas. So the
documents here carry what that check reads, in kube-apiserver's shape: the index maps
`api/v1`, `apis/<group>/<version>` to a `serverRelativeURL` with a `hash`, and each document
lists the object paths of each resource with its verbs, `x-kubernetes-group-version-kind`
and the query parameters. Schemas are left out (`components.schemas` is empty): the
emulator does not validate fields (a known gap, see `tests.support.kube`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from tests.support.kube_resources import Resource
from tests.support.kube_semantics import JSON, ApiError

_QUERY = {"in": "query", "uniqueItems": True, "schema": {"type": "string", "uniqueItems": True}}
_WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation")


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _operation(res: Resource, action: str, verb: str, params: Iterable[str]) -> JSON:
    # kube-apiserver's style: patchAppsV1NamespacedDeployment, readCoreV1Namespace.
    group = res.group.split(".")[0].capitalize() if res.group else "Core"
    scope = "Namespaced" if res.namespaced else ""
    return {
        "operationId": f"{action}{group}{res.version.capitalize()}{scope}{res.kind}",
        "x-kubernetes-action": verb,
        "x-kubernetes-group-version-kind": {
            "group": res.group,
            "version": res.version,
            "kind": res.kind,
        },
        "parameters": [{"name": name, **_QUERY} for name in params],
        "responses": {"200": {"description": "OK"}},
    }


def _paths(res: Resource) -> JSON:
    prefix = "/" + _gv_path(res.group, res.version)
    scope = "/namespaces/{namespace}" if res.namespaced else ""
    collection = f"{prefix}{scope}/{res.plural}"
    return {
        collection: {
            "get": _operation(res, "list", "list", ("labelSelector", "fieldSelector")),
            "post": _operation(res, "create", "post", _WRITE_PARAMS),
        },
        f"{collection}/{{name}}": {
            "get": _operation(res, "read", "get", ()),
            "put": _operation(res, "replace", "put", _WRITE_PARAMS),
            "patch": _operation(res, "patch", "patch", (*_WRITE_PARAMS, "force")),
            "delete": _operation(res, "delete", "delete", ("dryRun", "propagationPolicy")),
        },
    }


def document(resources: Iterable[Resource], path: str, server_version: str) -> JSON:
    """The OpenAPI v3 document of one group/version (`api/v1`, `apis/apps/v1`)."""
    served = [r for r in resources if _gv_path(r.group, r.version) == path]
    if not served:
        raise ApiError(404, "the server could not find the requested resource")
    paths: JSON = {}
    for res in served:
        paths.update(_paths(res))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": server_version},
        "paths": paths,
        "components": {"schemas": {}},
    }


def index(resources: Iterable[Resource], server_version: str) -> JSON:
    """`/openapi/v3`: each group/version with the URL of its document, hashed by content."""
    resources = list(resources)
    served = sorted({_gv_path(r.group, r.version) for r in resources})
    paths: JSON = {}
    for path in served:
        body = json.dumps(document(resources, path, server_version), sort_keys=True)
        digest = hashlib.sha512(body.encode()).hexdigest()[:128].upper()
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}
