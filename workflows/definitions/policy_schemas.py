"""The openAPIV3Schema of an InPlacePolicy's and an UpgradePolicy's spec (`crds` wraps them).

Built from the fields `workflows.definitions.policies` validates, with the structural-schema
rules of `workflows.definitions.schemas` (types everywhere, unknown fields preserved so that
hooksvc names them, no defaults).
"""

from __future__ import annotations

from workflows.definitions import policies, schemas

Schema = schemas.Schema


def _label_selector(text: str) -> Schema:
    expression: Schema = {
        "type": "object",
        "required": ["key", "operator"],
        "properties": {
            "key": {"type": "string", "minLength": 1},
            "operator": {"type": "string", "enum": list(policies.OPERATORS)},
            "values": {"type": "array", "items": {"type": "string"}},
        },
    }
    return {
        "type": "object",
        "description": text,
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "matchExpressions": {"type": "array", "items": expression},
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }


def _paths(text: str) -> Schema:
    return {
        "type": "array",
        "description": text,
        "maxItems": policies.MAX_ITEMS,
        "items": {"type": "string", "pattern": r"^spec(\.[A-Za-z0-9_-]+)*$"},
    }


def _namespaces(text: str) -> Schema:
    return {"type": "array", "description": text, "items": {"type": "string", "minLength": 1}}


def _versions(text: str) -> Schema:
    return {
        "type": "array",
        "description": text,
        "maxItems": policies.MAX_ITEMS,
        "items": {"type": "string", "minLength": 1},
    }


def in_place_spec() -> Schema:
    schema = schemas.object_schema(
        "Which changes of which Machines hooksvc updates in place (docs: in-place-updates.md).",
        {
            "machineSelector": _label_selector(
                "The Machines (CanUpdateMachine) or MachineSets (CanUpdateMachineSet) whose"
                " labels match; empty: all."
            ),
            "namespaces": _namespaces("Only objects in these namespaces; empty: all."),
            "machine": _paths("Field paths of the Machine spec handled in place (spec.version)."),
            "bootstrapConfig": _paths("Field paths of the bootstrap config spec (spec.files)."),
            "infrastructureMachine": _paths("Field paths of the infrastructure machine spec."),
            "affectsAvailability": {
                "type": "boolean",
                "description": "Whether updating in place disrupts the Machine's workloads."
                " Default: true.",
            },
        },
        policies.IN_PLACE_FIELDS,
    )
    return schema


def upgrade_spec() -> Schema:
    schema = schemas.object_schema(
        "The versions a multi-minor upgrade goes through (docs: in-place-updates.md).",
        {
            "clusterSelector": _label_selector("Clusters whose labels match; empty: all."),
            "namespaces": _namespaces("Only Clusters in these namespaces; empty: all."),
            "clusterClass": {
                "type": "string",
                "description": "Only Clusters of this ClusterClass.",
                "minLength": 1,
            },
            "versions": _versions("The versions allowed (e.g. those your image builder ships)."),
            "pins": {
                "type": "object",
                "description": "Per minor (v1.31), the version to pass through.",
                "additionalProperties": {"type": "string"},
            },
            "skip": _versions("Versions never to use (known bad)."),
            "workers": {
                "type": "string",
                "description": "Minimal: workers upgrade only when the skew policy demands it;"
                " EveryMinor: with every control plane step. Default: Minimal.",
                "enum": list(policies.WORKERS),
            },
        },
        policies.UPGRADE_FIELDS,
    )
    schema["required"] = ["versions"]
    return schema
