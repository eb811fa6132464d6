"""hooksvc's CustomResourceDefinitions, generated from the definitions apply_workflows checks with.

`WorkflowTemplate` and `AddonProfile` of the API group `hooks.hooksvc.io` carry the same
spec as apply_workflows' documents. Their `openAPIV3Schema` is built here from the same
definitions `workflows.definitions.spec` validates with: the template's and profile's
fields, limits and choices (spec's and fields' constants) and every step type's `Param`s
(`workflows.steps.registry`), so the API server refuses a wrongly typed field before
hooksvc sees it. `manage.py crds` prints or writes them (`make crds` regenerates
k8s/base/crds/, which a test compares); with custom step modules an operator regenerates
them with HOOKSVC_STEP_MODULES set.

The schemas follow the apiextensions rules for structural schemas (kubernetes
staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/validation.go): every
node has a type, or preserves unknown fields; inside `oneOf`/`not` only value
constraints (enum, required, minimum...), never a type or a description; no
`additionalProperties` beside `properties`. Two choices follow from hooksvc's own rules:

- Objects with known fields also set `x-kubernetes-preserve-unknown-fields`: hooksvc
  refuses an unknown field by name (a typo must not silently do nothing), whereas the API
  server would prune it silently for a client that does not ask for strict validation.
- Nothing sets `default`: hooksvc fills defaults when it validates, so the resource keeps
  what its author wrote (the defaults are in the descriptions).

A step's `with` depends on its `type`: `with` lists every parameter of every step type
(typed once, where all types agree), and one `oneOf` branch per type names the type,
its required parameters, its own constraints, and forbids the other types' parameters.
Checks a schema cannot say (a cross-parameter `check`, a dependsOn cycle, unknown
fields) are hooksvc's: the resource's `Accepted` condition reports them.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from workflows.definitions import fields, spec
from workflows.steps import registry

VERSION = "v1alpha1"
#: The condition the resource controller writes: the spec is (or is not) what hooksvc runs.
ACCEPTED = "Accepted"
#: Where the committed CRDs live (make crds), relative to the repository.
DIRECTORY = "k8s/base/crds"

Schema = dict[str, Any]
_ANY: Schema = {"x-kubernetes-preserve-unknown-fields": True}
#: What a value constraint may hold inside `oneOf`/`not` (validation.go forbids the rest).
_VALUE_KEYS = (
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "required",
)


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


def _describe(text: str, default: Any = None) -> str:
    if default is None or default in ([], {}):
        return text
    return f"{text} Default: {json.dumps(default)}.".strip()


def _integer(
    text: str, *, minimum: int, maximum: int = fields.MAX_INT, default: Any = None
) -> Schema:
    return {
        "type": "integer",
        "description": _describe(text, default),
        "minimum": minimum,
        "maximum": maximum,
    }


def _choice(text: str, choices: Sequence[str]) -> Schema:
    return {"type": "string", "description": _describe(text, choices[0]), "enum": list(choices)}


def _name(text: str, max_length: int = fields.MAX_NAME) -> Schema:
    return {
        "type": "string",
        "description": text,
        "maxLength": max_length,
        "pattern": fields.DNS_LABEL_PATTERN,
    }


def _names(text: str) -> Schema:
    return {"type": "array", "description": text, "items": _name("A DNS-1123 label.")}


def _string_map(text: str) -> Schema:
    return {"type": "object", "description": text, "additionalProperties": {"type": "string"}}


def _object(text: str, properties: Mapping[str, Schema], known: Sequence[str]) -> Schema:
    if tuple(properties) != tuple(known):
        # The schema must list exactly what workflows.definitions.spec accepts.
        raise AssertionError(f"schema fields {list(properties)} differ from {list(known)}")
    return {
        "type": "object",
        "description": text,
        "properties": dict(properties),
        "x-kubernetes-preserve-unknown-fields": True,
    }


_SCALARS: tuple[tuple[set[type], Schema], ...] = (
    ({str}, {"type": "string"}),
    ({int}, {"type": "integer"}),
    ({float}, {"type": "number"}),
    ({int, float}, {"type": "number"}),
    ({bool}, {"type": "boolean"}),
    ({str, int}, {"x-kubernetes-int-or-string": True}),
)


def param_schema(param: registry.Param) -> Schema:
    """The schema of one step parameter's value, from its `Param`."""
    kinds = set(param.kind if isinstance(param.kind, tuple) else (param.kind,))
    scalar = [dict(schema) for types, schema in _SCALARS if types == kinds]
    if scalar:
        schema = scalar[0]
    elif kinds == {list}:
        items = param_schema(param.items) if param.items is not None else dict(_ANY)
        schema = {"type": "array", "items": items}
    elif kinds == {dict}:
        schema = _object_param(param)
    else:
        return dict(_ANY)  # a mix the schema cannot type: hooksvc checks it
    if param.choices:
        schema["enum"] = list(param.choices)
    if param.minimum is not None:
        schema["minimum"] = param.minimum
    if param.default not in (None, [], {}):
        schema["description"] = _describe("", param.default)
    return schema


def _object_param(param: registry.Param) -> Schema:
    if param.fields is not None:
        schema: Schema = {
            "type": "object",
            "properties": {k: param_schema(p) for k, p in param.fields.items()},
            "x-kubernetes-preserve-unknown-fields": True,
        }
        required = [k for k, p in param.fields.items() if p.required]
        if required:
            schema["required"] = required
        return schema
    if param.values is not None:
        return {"type": "object", "additionalProperties": param_schema(param.values)}
    return {"type": "object", **_ANY}


def _structure(schema: Schema) -> Schema:
    """`schema` without its value constraints (what may differ between step types)."""
    out = {k: v for k, v in schema.items() if k not in _VALUE_KEYS and k != "description"}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _structure(out[key])
    if "properties" in out:
        out["properties"] = {k: _structure(v) for k, v in out["properties"].items()}
    return out


def _constraints(schema: Schema) -> Schema:
    """Only the value constraints of `schema`: what a `oneOf` branch may say about a value."""
    out: Schema = {k: v for k, v in schema.items() if k in _VALUE_KEYS}
    if isinstance(schema.get("items"), dict) and (items := _constraints(schema["items"])):
        out["items"] = items
    nested = {k: c for k, v in (schema.get("properties") or {}).items() if (c := _constraints(v))}
    if nested:
        out["properties"] = nested
    return out


def _step(types: Mapping[str, registry.StepType]) -> Schema:
    """A step: its fields, `with` typed for every step type, and one branch per type."""
    params = {name: {p: param_schema(x) for p, x in t.params.items()} for name, t in types.items()}
    union: dict[str, Schema] = {}
    for key in sorted({p for schemas in params.values() for p in schemas}):
        variants = [schemas[key] for schemas in params.values() if key in schemas]
        if all(v == variants[0] for v in variants):
            union[key] = variants[0]
        elif all(_structure(v) == _structure(variants[0]) for v in variants):
            union[key] = _structure(variants[0])
        else:
            union[key] = dict(_ANY)  # step types disagree on its type: hooksvc checks it
    branches: list[Schema] = []
    for name, schemas in params.items():
        with_: Schema = {}
        required = [p for p, x in types[name].params.items() if x.required]
        if required:
            with_["required"] = required
        own = {p: c for p, s in schemas.items() if union[p] != s and (c := _constraints(s))}
        if own:
            with_["properties"] = own
        foreign = [p for p in union if p not in schemas]
        if foreign:
            with_["not"] = {"anyOf": [{"required": [p]} for p in foreign]}
        branch: Schema = {"properties": {"type": {"enum": [name]}}}
        if with_:
            branch["properties"]["with"] = with_
        if required:
            branch["required"] = ["with"]
        branches.append(branch)
    step = _object(
        "One step of the workflow.",
        {
            "name": _name("The step's name, unique in the template."),
            "type": {
                "type": "string",
                "description": "The step type (a custom one needs the CRD regenerated).",
                "enum": list(types),
            },
            "with": {
                "type": "object",
                "description": "The step type's parameters (README: step types).",
                "properties": union,
                "x-kubernetes-preserve-unknown-fields": True,
            },
            "timeoutSeconds": _integer("The step fails once it has run this long.", minimum=1),
            "retries": _integer(
                "Attempts after a temporary failure, with backoff.",
                minimum=0,
                maximum=spec.MAX_RETRIES,
                default=spec.DEFAULT_RETRIES,
            ),
            "dependsOn": _names("Steps that must succeed (or be skipped) first."),
        },
        spec.STEP_FIELDS,
    )
    step["required"] = ["name", "type"]
    step["oneOf"] = branches
    return step


def _selector() -> Schema:
    return {
        "type": "object",
        "description": "Which Clusters the template applies to; every part given must match.",
        "properties": {
            "namespaces": {
                "type": "array",
                "description": "The Cluster's namespace is one of these.",
                "minItems": 1,
                "items": {"type": "string", "minLength": 1},
            },
            "matchLabels": _string_map("Labels the Cluster carries with these values."),
            "clusterClass": {
                "type": "string",
                "description": "The Cluster's ClusterClass name.",
                "minLength": 1,
            },
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }


def _retry_after() -> Schema:
    return _integer(
        "The most CAPI waits between calls while the run is unfinished (hooksvc answers the "
        "time until the run can next change, up to this).",
        minimum=1,
        default=spec.DEFAULT_RETRY_AFTER_SECONDS,
    )


def template_spec(types: Mapping[str, registry.StepType]) -> Schema:
    """The schema of a WorkflowTemplate's spec."""
    schema = _object(
        "What runs when a hook is called for a matching Cluster (README: workflow templates).",
        {
            "hook": {
                "type": "string",
                "description": "The lifecycle hook (or moment) that starts the workflow.",
                "enum": list(spec.TEMPLATE_HOOKS),
            },
            "clusterSelector": _selector(),
            "settings": _string_map("ExtensionConfig settings the call must carry."),
            "retryAfterSeconds": _retry_after(),
            "approvalRetryAfterSeconds": _integer(
                "How long CAPI waits between calls while the run waits only for an approval: "
                "shorter sees an approval sooner, for more calls. Default: retryAfterSeconds.",
                minimum=1,
            ),
            "onFailure": _choice("A failed run: Block keeps holding, Fail fails.", spec.ON_FAILURE),
            "deadlineSeconds": _integer("A deadline for the whole run.", minimum=1),
            "onDeadline": _choice("What happens after the deadline.", spec.ON_DEADLINE),
            "concurrency": _integer("At most this many runs at once, fleet-wide.", minimum=1),
            "waitFor": _names("Templates whose runs for the same Cluster finish first."),
            "holdsLifecycle": {
                "type": "boolean",
                "description": "false: the run goes on in the background. Default: true "
                "(false, and only false, for ClusterDeleted).",
            },
            "steps": {
                "type": "array",
                "description": "The steps; independent ones run in parallel.",
                "minItems": 1,
                "maxItems": spec.MAX_STEPS,
                "items": _step(types),
            },
        },
        spec.TEMPLATE_FIELDS,
    )
    schema["required"] = ["hook", "steps"]
    return schema


def profile_spec() -> Schema:
    """The schema of an AddonProfile's spec (its `addons` are addon_install's `with`)."""
    install = registry.get("addon_install")
    addons = {
        "type": "object",
        "description": "What addon_install takes as `with`: manifests, configMapRef or charts.",
        "properties": {p: param_schema(x) for p, x in install.params.items()},
        "x-kubernetes-preserve-unknown-fields": True,
    }
    schema = _object(
        "Add-ons for matching Clusters, removed at their deletion (README: add-on profiles).",
        {
            "clusterSelector": _selector(),
            "dependsOn": _names("AddonProfiles installed first and removed after this one."),
            "clusterDeletionBehavior": _choice(
                "What happens to the add-ons when the Cluster is deleted.",
                spec.DELETION_BEHAVIOURS,
            ),
            "addons": addons,
            "retryAfterSeconds": _retry_after(),
        },
        spec.PROFILE_FIELDS,
    )
    schema["required"] = ["addons"]
    return schema


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
    else:
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
    return [
        {"name": "Deletion", "type": "string", "jsonPath": ".spec.clusterDeletionBehavior"},
        *accepted,
    ]


def definition(kind: str, types: Mapping[str, registry.StepType]) -> Schema:
    """The CustomResourceDefinition of `kind` (cluster-scoped, like the names it holds)."""
    plural = spec.PLURALS[kind]
    if kind == "WorkflowTemplate":
        name = _name("The template's name, as runs and waitFor name it.")
        body = template_spec(types)
    else:
        name = _name("The profile's name.", max_length=spec.MAX_PROFILE_NAME)
        body = profile_spec()
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
