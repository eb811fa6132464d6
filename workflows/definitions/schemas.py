"""The openAPIV3Schema of a WorkflowTemplate's and an AddonProfile's spec (`crds` wraps them).

Built from the same definitions `workflows.definitions.spec` validates with: the template's
and profile's fields, limits and choices (spec's and fields' constants) and every step
type's `Param`s (`workflows.steps.registry`), so the API server refuses a wrongly typed
field before hooksvc sees it.

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

import json
from collections.abc import Mapping, Sequence
from typing import Any

from workflows.definitions import fields, spec
from workflows.steps import registry

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


def dns_name(text: str, max_length: int = fields.MAX_NAME) -> Schema:
    """A DNS-1123 label, as template, profile and step names are."""
    return {
        "type": "string",
        "description": text,
        "maxLength": max_length,
        "pattern": fields.DNS_LABEL_PATTERN,
    }


def _names(text: str) -> Schema:
    return {"type": "array", "description": text, "items": dns_name("A DNS-1123 label.")}


def _string_map(text: str) -> Schema:
    return {"type": "object", "description": text, "additionalProperties": {"type": "string"}}


def object_schema(text: str, properties: Mapping[str, Schema], known: Sequence[str]) -> Schema:
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
    step = object_schema(
        "One step of the workflow.",
        {
            "name": dns_name("The step's name, unique in the template."),
            "type": {
                "type": "string",
                "description": "The step type (a custom one needs the CRD regenerated).",
                "enum": list(types),
            },
            "with": {
                "type": "object",
                "description": "The step type's parameters (docs: templates.md, the step types).",
                "properties": union,
                "x-kubernetes-preserve-unknown-fields": True,
            },
            "timeoutSeconds": _integer(
                "The step fails once it has run this long, whether its code returns or not;"
                " 0: never (default: its type's bound).",
                minimum=0,
            ),
            "retries": _integer(
                "Temporary errors in a row (since the step last made progress) that it"
                " survives, with backoff; it fails only past both these and retryForSeconds.",
                minimum=0,
                maximum=spec.MAX_RETRIES,
                default=spec.DEFAULT_RETRIES,
            ),
            "retryForSeconds": _integer(
                "How long a streak of temporary errors may last before it fails the step;"
                " it fails only past both this and retries.",
                minimum=0,
                maximum=spec.MAX_RETRY_FOR_SECONDS,
                default=spec.DEFAULT_RETRY_FOR_SECONDS,
            ),
            "dependsOn": _names("Steps that must succeed (or be skipped) first."),
            "stallSeconds": _integer(
                "How long the step may go without progress (what it reports unchanged) before"
                " it shows as stalled; 0: never (default: its type's normal bound).",
                minimum=0,
            ),
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
    schema = object_schema(
        "What runs when a hook is called for a matching Cluster (docs: templates.md).",
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
    schema = object_schema(
        "Add-ons for matching Clusters, removed at their deletion (docs: addon-profiles.md).",
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
