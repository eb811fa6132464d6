"""The pure rules of the Kubernetes API emulator: selectors, patches, Status bodies.

`tests.support.kube` owns the server and its state; this module holds what does not need
either, so each rule reads (and is tested) on its own: label and field selectors as
kube-apiserver parses them, JSON merge patch (RFC 7386), JSON patch (RFC 6902), the
`Status` bodies the official client turns into `ApiException`, and the validation of the
built-in kinds whose fields the emulator checks (Leases).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from typing import Any

JSON = dict[str, Any]

#: Reasons kube-apiserver puts in a failure Status, by HTTP code.
REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """A request the emulator answers with a failure Status."""

    def __init__(
        self, code: int, message: str, *, reason: str | None = None, details: JSON | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> JSON:
        body: JSON = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


# --- selectors -------------------------------------------------------------------------

_SET_TERM = re.compile(r"^\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_TERM = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s,()]*)\s*$")
_EXISTS_TERM = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s*$")


def _split_terms(selector: str) -> list[str]:
    # Commas separate terms except inside the value list of `in (a,b)`.
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [term for term in terms if term.strip()]


def label_selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Whether `labels` satisfy a label selector (=, ==, !=, in, notin, exists, !exists)."""
    for term in _split_terms(selector):
        if match := _SET_TERM.match(term):
            key, op, raw_values = match.groups()
            values = {value.strip() for value in raw_values.split(",") if value.strip()}
            if (op == "in") != (labels.get(key) in values):
                return False
        elif match := _EQ_TERM.match(term):
            key, op, value = match.groups()
            if (op == "!=") == (labels.get(key) == value):
                return False
        elif match := _EXISTS_TERM.match(term):
            negated, key = match.groups()
            if bool(negated) == (key in labels):
                return False
        else:
            raise ApiError(400, f"unable to parse requirement: {term.strip()!r}")
    return True


def _field(obj: JSON, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def field_selector_matches(selector: str, obj: JSON) -> bool:
    """Whether `obj` satisfies a field selector of `path=value`, `path==value`, `path!=value`.

    kube-apiserver accepts only a few paths per kind (metadata.name and metadata.namespace
    everywhere); the emulator accepts any dotted path.
    """
    for term in _split_terms(selector):
        match = _EQ_TERM.match(term)
        if match is None:
            raise ApiError(400, f"invalid field selector: {term.strip()!r}")
        path, op, value = match.groups()
        if (op == "!=") == (_field(obj, path) == value):
            return False
    return True


# --- patches ---------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null deletes, anything else replaces (lists too)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts[:-1]:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ApiError(422, f"path {path!r} does not exist") from None
    return node


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent, last = _parent(doc, parts, path), parts[-1]
    try:
        return parent[int(last)] if isinstance(parent, list) else parent[last]
    except (KeyError, IndexError, ValueError, TypeError):
        raise ApiError(422, f"path {path!r} does not exist") from None


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent, last = _parent(doc, parts, path), parts[-1]
    value = _get(doc, path)
    if isinstance(parent, list):
        del parent[int(last)]
    else:
        del parent[last]
    return value


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, last = _parent(doc, parts, path), parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if not 0 <= index <= len(parent):
            raise ApiError(422, f"index out of range in {path!r}")
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise ApiError(422, f"path {path!r} does not exist")
    return doc


def json_patch(target: JSON, operations: Any) -> JSON:
    """RFC 6902: add, remove, replace, move, copy and test, applied in order, all or nothing."""
    if not isinstance(operations, list):
        raise ApiError(400, "a JSON patch must be a list of operations")
    doc: Any = copy.deepcopy(target)
    for op in operations:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            if _pointer(path):
                _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            value = _get(doc, op["from"])
            if kind == "move":
                _remove(doc, op["from"])
            doc = _add(doc, path, copy.deepcopy(value))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise ApiError(422, f"test operation failed at {path!r}")
        else:
            raise ApiError(400, f"unknown JSON patch operation {kind!r}")
    if not isinstance(doc, dict):
        raise ApiError(422, "a JSON patch must leave an object")
    return doc


# --- type-specific defaults ------------------------------------------------------------


def fold_string_data(obj: JSON) -> None:
    """Secrets: `stringData` is write-only; kube-apiserver merges it into base64 `data`."""
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        data = obj.setdefault("data", {}) or {}
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = data
    obj.setdefault("type", "Opaque")


# --- validation of built-in kinds -------------------------------------------------------

#: metav1.MicroTime's only JSON form: RFC 3339 with exactly six fractional digits
#: (apimachinery pkg/apis/meta/v1/micro_time.go UnmarshalJSON, layout RFC3339Micro).
_MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")


def validate(group: str, kind: str, obj: JSON) -> None:
    """What kube-apiserver refuses in a written object of a kind the emulator checks.

    Leases: MicroTime fields that do not decode are a 400 (the body cannot be decoded);
    kubernetes pkg/apis/coordination/validation ValidateLeaseSpec makes a non-positive
    leaseDurationSeconds or a negative leaseTransitions a 422.
    """
    if (group, kind) != ("coordination.k8s.io", "Lease"):
        return
    spec = obj.get("spec") or {}
    for field in ("acquireTime", "renewTime"):
        value = spec.get(field)
        if value is not None and not (isinstance(value, str) and _MICRO_TIME.match(value)):
            raise ApiError(
                400,
                'Lease in version "v1" cannot be handled as a Lease: parsing time '
                f'{json.dumps(value)} as "2006-01-02T15:04:05.000000Z07:00": cannot parse',
            )
    name = (obj.get("metadata") or {}).get("name", "")
    for field, least, words in (
        ("leaseDurationSeconds", 1, "must be greater than 0"),
        ("leaseTransitions", 0, "must be greater than or equal to 0"),
    ):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or value < least):
            raise ApiError(
                422,
                f'Lease.coordination.k8s.io "{name}" is invalid: spec.{field}: Invalid value: '
                f"{value}: {words}",
                details={"name": name, "group": "coordination.k8s.io", "kind": "Lease"},
            )
