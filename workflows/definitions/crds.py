"""hooksvc's CustomResourceDefinitions, generated from the definitions apply_workflows checks with.

`WorkflowTemplate`, `AddonProfile`, `InPlacePolicy` and `UpgradePolicy` of the API group
`hooks.hooksvc.io` carry the same
spec as apply_workflows' documents; their spec's `openAPIV3Schema` comes from
`workflows.definitions.schemas`, and this module wraps it in the CRD: names, status and its
`Accepted` condition, printer columns. `manage.py crds` prints or writes them (`make crds`
regenerates k8s/base/crds/, which a test compares); with custom step modules an operator
regenerates them with HOOKSVC_STEP_MODULES set.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence

import yaml

from workflows.definitions import policy_schemas, schemas, spec
from workflows.steps import registry

VERSION = "v1alpha1"
#: The condition the resource controller writes: the spec is (or is not) what hooksvc runs.
ACCEPTED = "Accepted"
#: Where the committed CRDs live (make crds), relative to the repository.
DIRECTORY = "k8s/base/crds"

Schema = schemas.Schema


def step_types(modules: Sequence[str] = ()) -> dict[str, registry.StepType]:
    """The built-in step types and those `modules` register, by name."""
    for module in modules:
        importlib.import_module(module)
    wanted = ("workflows.steps.", *(f"{m}." for m in modules))
    return {
        name: step
        for name in registry.names()
        if (step := registry.find(name)) is not None
        and f"{step.run.__module__}.".startswith(wanted)
    }


#: metav1.Condition's type: an optional DNS-1123 subdomain and '/', then a qualified name.
_CONDITION_TYPE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)


def _conditions() -> Schema:
    # metav1.Condition, with the constraints of its kubebuilder markers
    # (kubernetes staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go).
    return {
        "type": "array",
        "description": "Accepted: whether hooksvc runs this spec, and if not, why.",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {
                    "type": "string",
                    "maxLength": 316,
                    "pattern": _CONDITION_TYPE,
                },
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "reason": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 1024,
                    "pattern": r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                },
                "message": {"type": "string", "maxLength": 32768},
            },
        },
    }


def _status(kind: str) -> Schema:
    properties: Schema = {
        "observedGeneration": {
            "type": "integer",
            "format": "int64",
            "description": "The metadata.generation hooksvc last looked at.",
            "minimum": 0,
        },
        "conditions": _conditions(),
    }
    if kind == "WorkflowTemplate":
        properties["steps"] = {
            "type": "integer",
            "description": "How many steps the template hooksvc runs has.",
            "minimum": 0,
        }
    elif kind == "AddonProfile":
        properties["templates"] = {
            "type": "array",
            "description": "The WorkflowTemplates hooksvc generated from this profile.",
            "items": {"type": "string"},
        }
    return {"type": "object", "description": "Written by hooksvc.", "properties": properties}


_ACCEPTED_PATH = f'.status.conditions[?(@.type=="{ACCEPTED}")]'


def _columns(kind: str) -> list[Schema]:
    accepted: list[Schema] = [
        {"name": "Accepted", "type": "string", "jsonPath": f"{_ACCEPTED_PATH}.status"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {
            "name": "Reason",
            "type": "string",
            "jsonPath": f"{_ACCEPTED_PATH}.reason",
            "priority": 1,
        },
    ]
    if kind == "WorkflowTemplate":
        return [
            {"name": "Hook", "type": "string", "jsonPath": ".spec.hook"},
            {"name": "Steps", "type": "integer", "jsonPath": ".status.steps"},
            *accepted,
        ]
    if kind == "AddonProfile":
        return [
            {"name": "Deletion", "type": "string", "jsonPath": ".spec.clusterDeletionBehavior"},
            *accepted,
        ]
    return accepted


def definition(kind: str, types: Mapping[str, registry.StepType]) -> Schema:
    """The CustomResourceDefinition of `kind` (cluster-scoped, like the names it holds)."""
    plural = spec.PLURALS[kind]
    if kind == "WorkflowTemplate":
        name = schemas.dns_name("The template's name, as runs and waitFor name it.")
        body = schemas.template_spec(types)
    elif kind == "AddonProfile":
        name = schemas.dns_name("The profile's name.", max_length=spec.MAX_PROFILE_NAME)
        body = schemas.profile_spec()
    else:
        name = schemas.dns_name("The policy's name.")
        body = (
            policy_schemas.in_place_spec()
            if kind == "InPlacePolicy"
            else policy_schemas.upgrade_spec()
        )
    root = {
        "type": "object",
        "description": f"A hooksvc {kind}, kept in sync with hooksvc by its resource controller.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object", "properties": {"name": name}},
            "spec": body,
            "status": _status(kind),
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{spec.GROUP}"},
        "spec": {
            "group": spec.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "categories": ["hooksvc"],
            },
            # Template and profile names are global in hooksvc (runs, waitFor, dependsOn).
            "scope": "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _columns(kind),
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


_HEADER = (
    "# Generated by `manage.py crds` from workflows/definitions (spec.py, fields.py) and the\n"
    "# step types' Params (workflows/steps): do not edit; `make crds` regenerates it.\n"
)


def files(modules: Sequence[str] = ()) -> dict[str, str]:
    """File name -> YAML text of each CRD, for the built-in step types and `modules`'."""
    types = step_types(modules)
    out: dict[str, str] = {}
    for kind, plural in spec.PLURALS.items():
        text = yaml.safe_dump(definition(kind, types), sort_keys=False, width=100)
        out[f"{spec.GROUP}_{plural}.yaml"] = _HEADER + text
    return out
