"""The OpenAPI 3 document of the hook API, generated from the catalog and the handlers.

Published at `/openapi.json` on the hook port, so that API tools (schemathesis in our
tests, a reviewer's viewer) see what hooksvc accepts and answers. It describes only what
`hooksvc.contract.wire` checks: required fields, their types, and that unknown fields are allowed
(CAPI sends whole Cluster objects). Every answer on a known path is HTTP 200 with the
outcome in the body (see `hooksvc.serving.views`), which the document says too.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from hooksvc.contract import catalog, handlers, wire

OPENAPI_VERSION = "3.0.3"
PATH = "/openapi.json"

_STRING = {"type": "string"}
_NON_EMPTY = {"type": "string", "minLength": 1}
_STRING_MAP = {"type": "object", "additionalProperties": _STRING}
_VERSION = {"type": "string", "maxLength": wire.MAX_VERSION}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _type_meta(api_version: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": {"type": "string", "enum": [api_version]},
        "kind": {"type": "string", "enum": [kind]},
    }


def _common_schemas() -> dict[str, Any]:
    class_ref = {"type": "object", "properties": {"name": _STRING, "namespace": _STRING}}
    return {
        "Cluster": {
            "type": "object",
            "description": "A cluster.x-k8s.io Cluster (v1beta1 or v1beta2); other fields ignored.",
            "required": ["metadata"],
            "properties": {
                "apiVersion": {"type": "string", "pattern": r"^cluster\.x-k8s\.io(/.*)?$"},
                "kind": {"type": "string", "enum": ["Cluster"]},
                "metadata": {
                    "type": "object",
                    "required": ["name", "namespace"],
                    "properties": {
                        "name": {**_NON_EMPTY, "maxLength": wire.MAX_NAME},
                        "namespace": {**_NON_EMPTY, "maxLength": wire.MAX_NAMESPACE},
                        "uid": {**_STRING, "maxLength": wire.MAX_UID},
                        "labels": _STRING_MAP,
                        "annotations": _STRING_MAP,
                        "deletionTimestamp": _STRING,
                    },
                },
                "spec": {
                    "type": "object",
                    "properties": {
                        "topology": {
                            "type": "object",
                            "properties": {
                                "version": _STRING,
                                "class": _STRING,
                                "classNamespace": _STRING,
                                "classRef": class_ref,
                            },
                        }
                    },
                },
            },
        },
        "UpgradeStep": {"type": "object", "properties": {"version": _VERSION}},
        "DiscoveryRequest": {
            "type": "object",
            "required": ["apiVersion", "kind"],
            "properties": _type_meta(catalog.API_VERSION, "DiscoveryRequest"),
        },
        "DiscoveryResponse": {
            "type": "object",
            "required": ["apiVersion", "kind", "status"],
            "additionalProperties": False,
            "properties": {
                **_type_meta(catalog.API_VERSION, "DiscoveryResponse"),
                "status": {"type": "string", "enum": [s.value for s in catalog.Status]},
                "message": _STRING,
                "handlers": {"type": "array", "items": _ref("ExtensionHandler")},
            },
        },
        "ExtensionHandler": {
            "type": "object",
            "required": ["name", "requestHook", "timeoutSeconds", "failurePolicy"],
            "properties": {
                "name": _STRING,
                "requestHook": {
                    "type": "object",
                    "required": ["apiVersion", "hook"],
                    "properties": {
                        "apiVersion": _STRING,
                        "hook": {"type": "string", "enum": list(catalog.ALL_HOOKS)},
                    },
                },
                "timeoutSeconds": {"type": "integer", "minimum": 0, "maximum": 30},
                "failurePolicy": {"type": "string", "enum": list(handlers.FAILURE_POLICIES)},
            },
        },
    }


def _object_schema(description: str, kind: str = "") -> dict[str, Any]:
    metadata = {
        "type": "object",
        "required": ["name", "namespace"],
        "properties": {
            "name": {**_NON_EMPTY, "maxLength": wire.MAX_NAME},
            "namespace": {**_NON_EMPTY, "maxLength": wire.MAX_NAMESPACE},
            "labels": _STRING_MAP,
            "annotations": _STRING_MAP,
        },
    }
    properties: dict[str, Any] = {
        "apiVersion": _STRING,
        "kind": {"type": "string", "enum": [kind]} if kind else _STRING,
        "metadata": metadata,
        "spec": {"type": "object"},
    }
    return {
        "type": "object",
        "description": description,
        "required": ["metadata"],
        "properties": properties,
    }


#: The optional hooks' request objects: (owner key, kind, infrastructure key, bootstrap key).
_OBJECTS = {
    "CanUpdateMachine": ("machine", "Machine", "infrastructureMachine", "bootstrapConfig"),
    "UpdateMachine": ("machine", "Machine", "infrastructureMachine", "bootstrapConfig"),
    "CanUpdateMachineSet": (
        "machineSet",
        "MachineSet",
        "infrastructureMachineTemplate",
        "bootstrapConfigTemplate",
    ),
}
_PATCH = {
    "type": "object",
    "required": ["patchType", "patch"],
    "properties": {
        "patchType": {"type": "string", "enum": ["JSONPatch", "JSONMergePatch"]},
        # A Go []byte: base64 on the wire.
        "patch": {"type": "string", "format": "byte"},
    },
}
_PATCHES = {
    "CanUpdateMachine": ("machinePatch", "infrastructureMachinePatch", "bootstrapConfigPatch"),
    "CanUpdateMachineSet": (
        "machineSetPatch",
        "infrastructureMachineTemplatePatch",
        "bootstrapConfigTemplatePatch",
    ),
}


def _optional_request(hook: catalog.Hook) -> dict[str, Any]:
    properties: dict[str, Any] = {
        **_type_meta(catalog.API_VERSION, hook.request_kind),
        "settings": _STRING_MAP,
    }
    if hook.name == "GenerateUpgradePlan":
        version = {**_NON_EMPTY, **_VERSION}
        properties.update(
            cluster=_ref("Cluster"),
            fromControlPlaneKubernetesVersion=version,
            fromWorkersKubernetesVersion=_VERSION,
            toKubernetesVersion=version,
        )
        required = ["cluster", "fromControlPlaneKubernetesVersion", "toKubernetesVersion"]
    else:
        owner, kind, infra, bootstrap = _OBJECTS[hook.name]
        objects = {
            "type": "object",
            "required": [owner, infra],
            "properties": {
                owner: _object_schema(f"A cluster.x-k8s.io {kind}: metadata and spec.", kind),
                infra: _object_schema("The provider's object: metadata and spec."),
                bootstrap: _object_schema("The bootstrap provider's object, if any."),
            },
        }
        groups = ["desired"] if hook.name == "UpdateMachine" else ["current", "desired"]
        properties.update({g: objects for g in groups})
        required = groups
    return {
        "type": "object",
        "required": ["apiVersion", "kind", *required],
        "properties": properties,
    }


def _request_schema(hook: catalog.Hook) -> dict[str, Any]:
    if hook.optional:
        return _optional_request(hook)
    properties: dict[str, Any] = {
        **_type_meta(catalog.API_VERSION, hook.request_kind),
        "cluster": _ref("Cluster"),
        "settings": _STRING_MAP,
    }
    for field in hook.version_fields:
        properties[field] = {**_NON_EMPTY, **_VERSION}
    if hook.has_upgrade_plan:
        plan = {"type": "array", "items": _ref("UpgradeStep")}
        properties.update(controlPlaneUpgrades=plan, workersUpgrades=plan)
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "cluster", *hook.version_fields],
        "properties": properties,
    }


def _response_schema(hook: catalog.Hook) -> dict[str, Any]:
    properties: dict[str, Any] = {
        **_type_meta(catalog.API_VERSION, hook.response_kind),
        "status": {"type": "string", "enum": [s.value for s in catalog.Status]},
        "message": _STRING,
    }
    required = ["apiVersion", "kind", "status"]
    if hook.blocking:
        # Blocking hooks always carry it (catalog.response); 0 lets the lifecycle move on.
        properties["retryAfterSeconds"] = {
            "type": "integer",
            "minimum": 0,
            "maximum": catalog.MAX_RETRY_AFTER_SECONDS,
        }
        required.append("retryAfterSeconds")
    for name in _PATCHES.get(hook.name, ()):
        properties[name] = _PATCH
    if hook.name == "GenerateUpgradePlan":
        plan = {"type": "array", "items": _ref("UpgradeStep")}
        properties.update(controlPlaneUpgrades=plan, workersUpgrades=plan)
    return {
        "type": "object",
        "required": required,
        "additionalProperties": False,
        "properties": properties,
    }


def _operation(summary: str, request: str, response: str) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "operationId": request.removesuffix("Request"),
            "parameters": [
                {
                    "name": "timeout",
                    "in": "query",
                    "required": False,
                    "description": "CAPI's call timeout, e.g. 10s; accepted and not used.",
                    "schema": _STRING,
                }
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(request)}},
            },
            "responses": {
                "200": {
                    "description": "Every answer, bad input included: the outcome is in status.",
                    "content": {"application/json": {"schema": _ref(response)}},
                }
            },
        }
    }


def document() -> dict[str, Any]:
    """The OpenAPI document for this process's handlers and path prefix."""
    prefix = f"/{settings.HOOKS_PATH_PREFIX}" if settings.HOOKS_PATH_PREFIX else ""
    base = f"{prefix}/{catalog.GROUP}/{catalog.VERSION}"
    schemas = _common_schemas()
    paths: dict[str, Any] = {
        f"{base}/{catalog.DISCOVERY_PATH_SEGMENT}": _operation(
            "Lists the handlers this server registers", "DiscoveryRequest", "DiscoveryResponse"
        )
    }
    for handler in handlers.configured():
        hook = handler.hook
        schemas[hook.request_kind] = _request_schema(hook)
        schemas[hook.response_kind] = _response_schema(hook)
        blocking = "blocking" if hook.blocking else "non-blocking"
        paths[f"{base}/{hook.path_segment}/{handler.name}"] = _operation(
            f"{hook.name} ({blocking})", hook.request_kind, hook.response_kind
        )
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "hooksvc Runtime SDK hooks",
            "version": catalog.VERSION,
            "description": "Cluster API Runtime Extension endpoints served by hooksvc.",
        },
        "paths": paths,
        "components": {"schemas": schemas},
    }


@require_GET
def view(request: HttpRequest) -> JsonResponse:
    """GET /openapi.json: the document for this process (no authentication, like discovery)."""
    return JsonResponse(document())
