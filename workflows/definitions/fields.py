"""Checks of one field of an operator's YAML document, each raising `FieldError` with its path.

Paths read like kubectl's (`spec.steps[1].with.seconds`); `workflows.definitions.spec` adds the
document. Shared by every document kind.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

#: A DNS-1123 label (at most 63 characters), as Kubernetes names most objects.
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MAX_NAME = 63
_DNS_LABEL = re.compile(DNS_LABEL_PATTERN)
#: Integers end up in PostgreSQL integer columns and timedeltas: keep them in int32.
MAX_INT = 2**31 - 1


class FieldError(Exception):
    """A field is invalid; the message starts with its path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)


class FieldErrors(FieldError):
    """Several invalid fields of one document, each message starting with its path; a
    FieldError too, so whoever catches one shows them all ("; "-joined)."""

    def __init__(self, messages: Sequence[str]) -> None:
        Exception.__init__(self, "; ".join(messages))
        self.messages = list(messages)


class Problems:
    """The problems of independent checks of one document, to report all of them at once:
    an operator fixing a template one error per apply took as many rounds as errors."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def add(self, error: FieldError) -> None:
        self.messages += error.messages if isinstance(error, FieldErrors) else [str(error)]

    def check(self, checker: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """`checker(*args, **kwargs)`, or None with its problem noted."""
        try:
            return checker(*args, **kwargs)
        except FieldError as exc:
            self.add(exc)
            return None

    def raise_any(self) -> None:
        if self.messages:
            raise FieldErrors(self.messages)


def join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def mapping(
    value: Any,
    where: str,
    known: Sequence[str],
    required: Sequence[str] = (),
    problems: Problems | None = None,
) -> dict[str, Any]:
    """`value` as an object of the `known` fields with the `required` ones. With `problems`,
    unknown and missing fields are noted there (every one) and the object comes back."""
    if not isinstance(value, dict):
        raise FieldError(where, "must be an object")
    found = [
        FieldError(join(where, str(key)), f"unknown field (known: {', '.join(known)})")
        for key in value
        if key not in known
    ] + [FieldError(join(where, key), "is required") for key in required if value.get(key) is None]
    if problems is not None:
        for error in found:
            problems.add(error)
    elif found:
        raise found[0]
    return value


def string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise FieldError(where, "must be a non-empty string")
    return value


def name(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_NAME or not _DNS_LABEL.match(value):
        raise FieldError(
            where,
            "must be a DNS-1123 label (at most 63 lower-case letters, digits or '-', "
            f"starting and ending with a letter or digit), got {value!r}",
        )
    return value


def integer(
    value: Any, where: str, *, minimum: int, maximum: int = MAX_INT, default: int | None = None
) -> int | None:
    if value is None:
        return default
    # bool is an int in Python but not in YAML's eyes.
    if not isinstance(value, int) or isinstance(value, bool):
        raise FieldError(where, "must be an integer")
    if not minimum <= value <= maximum:
        raise FieldError(where, f"must be an integer from {minimum} to {maximum}")
    return value


def choice(value: Any, where: str, choices: Sequence[str]) -> str:
    if value is None:
        return choices[0]
    if value not in choices:
        raise FieldError(where, f"must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def string_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FieldError(where, "must be an object of strings")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise FieldError(join(where, str(key)), "must be a string (quote numbers)")
    return dict(value)


def names(value: Any, where: str, check: Callable[[Any, str], str] = name) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise FieldError(where, "must be a list")
    return [check(item, f"{where}[{i}]") for i, item in enumerate(value)]


def boolean(value: Any, where: str, default: bool) -> bool:
    """`value` as a bool, `default` when unset."""
    if value is None:
        return default
    if not isinstance(value, bool):
        raise FieldError(where, "must be true or false")
    return value
