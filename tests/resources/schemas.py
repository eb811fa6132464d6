"""What kube-apiserver checks of a CRD's schema, and of an object against it, for the tests.

`structural_errors` follows apiextensions-apiserver's rules for a CRD's openAPIV3Schema
(kubernetes staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/validation.go:
validateStructuralInvariants, validateNestedValueValidation; complete.go: completeness; and
pkg/apis/apiextensions/validation/validation.go: ValidateCustomResourceDefinitionOpenAPISchema
and specStandardValidatorV3). Paths in messages read like kube-apiserver's.

`object_errors` validates an object as the API server does before it stores it: nulls of
fields the schema describes are pruned first (defaulting/prunenulls.go,
PruneNonNullableNullsWithoutDefaults), then the value validation runs; jsonschema's Draft 4
is the JSON Schema dialect OpenAPI v3.0's schema objects extend. Not modelled: `format`
checks, CEL rules (none are used), pruning of unknown fields (hooksvc's objects preserve them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema

Schema = dict[str, Any]

_JUNCTORS = ("allOf", "anyOf", "oneOf")
#: Set inside a logic junctor, these make a schema non-structural (validation.go).
_FORBIDDEN_NESTED = (
    "type",
    "additionalProperties",
    "default",
    "title",
    "description",
    "nullable",
    "externalDocs",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
)
#: specStandardValidatorV3: never supported in a CRD's schema.
_UNSUPPORTED = ("id", "$ref", "additionalItems", "patternProperties", "definitions", "dependencies")
_COLUMN_TYPES = ("integer", "number", "string", "boolean", "date")


def structural_errors(schema: Schema) -> list[str]:
    """Why kube-apiserver would refuse `schema` as a CRD version's openAPIV3Schema."""
    errors = list(_static(schema, "openAPIV3Schema"))
    errors += _invariants(schema, "openAPIV3Schema", level="root")
    errors += _completeness(schema, "openAPIV3Schema")
    return sorted(errors)


def _static(s: Schema, path: str) -> Iterator[str]:
    for key in _UNSUPPORTED:
        if key in s:
            yield f"{path}.{key}: not supported"
    if s.get("uniqueItems") is True:
        yield f"{path}.uniqueItems: cannot be set to true"
    if s.get("type") == "null":
        yield f"{path}.type: cannot be null"
    if "default" in s:
        yield f"{path}.default: hooksvc's CRDs set no defaults"
    if "additionalProperties" in s and s.get("properties"):
        yield f"{path}.additionalProperties: and properties are mutual exclusive"
    if s.get("x-kubernetes-preserve-unknown-fields") is False:
        yield f"{path}.x-kubernetes-preserve-unknown-fields: must be true or undefined"
    if s.get("x-kubernetes-list-type") == "map":
        keys = s.get("x-kubernetes-list-map-keys") or []
        items = s.get("items") or {}
        if not keys or items.get("type") != "object":
            yield f"{path}: a map list needs keys and object items"
        for key in keys:
            if key not in (items.get("required") or []):
                yield f"{path}.items.properties[{key}]: a map key must be required"
    for key, sub in _children(s):
        yield from _static(sub, f"{path}.{key}")


def _children(s: Schema) -> Iterator[tuple[str, Schema]]:
    for name, sub in (s.get("properties") or {}).items():
        yield f"properties[{name}]", sub
    if isinstance(s.get("items"), dict):
        yield "items", s["items"]
    elif "items" in s:
        yield "items", {"$ref": "items must be a schema object and not an array"}
    if isinstance(s.get("additionalProperties"), dict):
        yield "additionalProperties", s["additionalProperties"]
    for junctor in _JUNCTORS:
        for index, sub in enumerate(s.get(junctor) or []):
            yield f"{junctor}[{index}]", sub
    if isinstance(s.get("not"), dict):
        yield "not", s["not"]


def _invariants(s: Schema, path: str, *, level: str) -> list[str]:
    errors: list[str] = []
    preserve = s.get("x-kubernetes-preserve-unknown-fields") is True
    int_or_string = s.get("x-kubernetes-int-or-string") is True
    if s.get("type") == "array" and "items" not in s:
        errors.append(f"{path}.items: Required value: must be specified")
    if not s.get("type") and not (preserve or int_or_string):
        errors.append(f"{path}.type: Required value: must not be empty ({level})")
    if level == "root":
        if s.get("type") != "object":
            errors.append(f"{path}.type: must be object at the root")
        if "additionalProperties" in s:
            errors.append(f"{path}.additionalProperties: must not be used at the root")
        metadata = (s.get("properties") or {}).get("metadata")
        if metadata is not None and set(metadata.get("properties") or {}) - {
            "name",
            "generateName",
        }:
            errors.append(f"{path}.properties[metadata]: only name and generateName")
    for name, sub in (s.get("properties") or {}).items():
        errors += _invariants(sub, f"{path}.properties[{name}]", level="field")
    if isinstance(s.get("items"), dict):
        errors += _invariants(s["items"], f"{path}.items", level="item")
    if isinstance(s.get("additionalProperties"), dict):
        errors += _invariants(
            s["additionalProperties"], f"{path}.additionalProperties", level="field"
        )
    for junctor in _JUNCTORS:
        for index, sub in enumerate(s.get(junctor) or []):
            errors += _nested(sub, f"{path}.{junctor}[{index}]")
    if isinstance(s.get("not"), dict):
        errors += _nested(s["not"], f"{path}.not")
    return errors


def _nested(v: Schema, path: str) -> list[str]:
    """validateNestedValueValidation: only value validations under a logic junctor."""
    errors = [
        f"{path}.{key}: must be undefined to be structural" for key in _FORBIDDEN_NESTED if key in v
    ]
    if "metadata" in (v.get("properties") or {}):
        errors.append(f"{path}.properties[metadata]: must not be specified in a nested context")
    for key, sub in _children(v):
        errors += _nested(sub, f"{path}.{key}")
    return errors


def _junctions(s: Schema) -> list[Schema]:
    subs = [sub for junctor in _JUNCTORS for sub in s.get(junctor) or []]
    return subs + ([s["not"]] if isinstance(s.get("not"), dict) else [])


def _completeness(s: Schema, path: str) -> list[str]:
    """Every property or items a junctor names is also specified outside of it (complete.go).

    kube-apiserver checks the junctors of the root; this checks those of every node.
    """
    errors: list[str] = []
    for sub in _junctions(s):
        errors += _covered(sub, s, path)
    for key, child in _children(s):
        if not key.startswith((*_JUNCTORS, "not")):
            errors += _completeness(child, f"{path}.{key}")
    return errors


def _covered(v: Schema, s: Schema | None, path: str) -> list[str]:
    if s is None:
        return [f"{path}: Required value: because a junctor defines it"]
    errors: list[str] = []
    for sub in _junctions(v):
        errors += _covered(sub, s, path)
    if isinstance(v.get("items"), dict):
        errors += _covered(v["items"], s.get("items"), f"{path}.items")
    for name, prop in (v.get("properties") or {}).items():
        errors += _covered(
            prop, (s.get("properties") or {}).get(name), f"{path}.properties[{name}]"
        )
    return errors


def column_errors(columns: list[Schema]) -> list[str]:
    """additionalPrinterColumns as ValidateCustomResourceColumnDefinition checks them."""
    errors = []
    for column in columns:
        if column.get("type") not in _COLUMN_TYPES:
            errors.append(f"{column.get('name')}: type must be one of {_COLUMN_TYPES}")
        if not str(column.get("jsonPath", "")).startswith("."):
            errors.append(f"{column.get('name')}: jsonPath must be a simple json path from .")
    return errors


def prune_nulls(value: Any, schema: Schema) -> Any:
    """`value` without the nulls of fields `schema` describes, as kube-apiserver drops them."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            sub = (schema.get("properties") or {}).get(key)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if item is None and sub is not None and not sub.get("nullable"):
                continue
            out[key] = prune_nulls(item, sub or {})
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune_nulls(item, schema["items"]) for item in value]
    return value


def object_errors(obj: Any, schema: Schema) -> list[str]:
    """What the API server's value validation would refuse in `obj`, by path."""
    validator = jsonschema.Draft4Validator(schema)
    return sorted(
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(prune_nulls(obj, schema))
    )
