"""Pod tolerations in a template, checked when it is applied as kube-apiserver checks them.

The rules and messages are kube-apiserver's (kubernetes v1.33, pkg/apis/core/validation/
validation.go, `ValidateTolerations`, and `validateTaintEffect`): a refused toleration
would otherwise surface only when the step creates its Pod, as a 422 after the step has
made its Namespace and ClusterRoleBinding. Like kube-apiserver, an `Exists` toleration
with a value and an `Equal` value that is no label value are reported on `operator`.
Only what a toleration holds is accepted: unknown fields are refused too.
"""

from __future__ import annotations

import re
from typing import Any

from workflows.steps import registry

FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
OPERATORS = ("Equal", "Exists")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# apimachinery pkg/util/validation/validation.go: IsQualifiedName and IsValidLabelValue.
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_RULE = (
    "must be a qualified name: at most 63 alphanumeric characters, '-', '_' or '.',"
    " starting and ending with an alphanumeric one, with an optional DNS subdomain"
    " prefix and '/'"
)
_VALUE_RULE = (
    "a valid label value must be an empty string or at most 63 alphanumeric characters,"
    " '-', '_' or '.', starting and ending with an alphanumeric one"
)


def _qualified(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _NAME.fullmatch(name) is not None


def _label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and _NAME.fullmatch(value) is not None)


def _shape(index: int, item: Any) -> None:
    """What JSON decoding into a v1.Toleration would refuse."""
    if not isinstance(item, dict):
        raise registry.ParamError(str(index), "must be an object")
    unknown = sorted(set(item) - set(FIELDS))
    if unknown:
        raise registry.ParamError(f"{index}.{unknown[0]}", "unknown field")
    for field in ("key", "operator", "value", "effect"):
        if not isinstance(item.get(field, ""), str):
            raise registry.ParamError(f"{index}.{field}", "must be a string")
    seconds = item.get("tolerationSeconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
        raise registry.ParamError(f"{index}.tolerationSeconds", "must be an integer")


def _rules(index: int, item: dict[str, Any]) -> None:
    """ValidateTolerations' rules, in its order."""
    seconds = item.get("tolerationSeconds")
    key, operator = item.get("key", ""), item.get("operator", "")
    value, effect = item.get("value", ""), item.get("effect", "")
    if key and not _qualified(key):
        raise registry.ParamError(f"{index}.key", _NAME_RULE)
    if not key and operator != "Exists":
        raise registry.ParamError(
            f"{index}.operator",
            'operator must be Exists when `key` is empty, which means "match all values'
            ' and all keys"',
        )
    if seconds is not None and effect != "NoExecute":
        raise registry.ParamError(
            f"{index}.effect", "effect must be 'NoExecute' when `tolerationSeconds` is set"
        )
    if operator in ("", "Equal"):
        if not _label_value(value):
            raise registry.ParamError(f"{index}.operator", _VALUE_RULE)
    elif operator == "Exists":
        if value:
            raise registry.ParamError(
                f"{index}.operator", "value must be empty when `operator` is 'Exists'"
            )
    else:
        raise registry.ParamError(
            f"{index}.operator",
            f'Unsupported value: "{operator}": supported values: "Equal", "Exists"',
        )
    if effect and effect not in EFFECTS:
        raise registry.ParamError(
            f"{index}.effect",
            f'Unsupported value: "{effect}": supported values: "NoSchedule",'
            ' "PreferNoSchedule", "NoExecute"',
        )


def check(value: list[Any]) -> list[Any]:
    """A `Param.check`: each toleration as ValidateTolerations sees it, the first error raised."""
    for index, item in enumerate(value):
        _shape(index, item)
        _rules(index, item)
    return value
