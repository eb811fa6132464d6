"""Hostile hook request bodies for property-based tests, and what a valid answer looks like.

Bodies start from CAPI's own requests (`tests.support.capi`) and are mutated: fields dropped
or replaced with wrong types, unicode (lone surrogates and NUL included), ~1 MiB strings
and deep nesting; then encoded, sometimes with a duplicated key or a non-UTF-8 byte
spliced into the raw bytes. Each body says which rejection it must get, when that is known
without asking the code under test.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

from hooksvc.contract import catalog
from tests.support import capi

#: One MiB: a string this long travels in a body well under the 20 MiB limit.
HUGE = 1 << 20

_ODD_TEXT = st.one_of(
    st.text(),
    # Lone surrogates survive json.dumps as \\udXXX escapes and decode back to bad str.
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),
    st.text(st.sampled_from(["\x00", "\u202e", "\ufeff", "é", "😀", "\n"]), min_size=1),
    # Just over the lengths Kubernetes (and hooksvc's columns) allow, and ~1 MiB.
    st.integers(60, 400).map(lambda n: "n" * n),
    st.integers(1, 4).map(lambda n: "x" * (HUGE // n)),
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),  # NaN and Infinity too: Python's json module writes and reads them
    _ODD_TEXT,
)


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for i in range(depth):
        value = [value] if i % 2 else {"n": value}
    return value


JSON_VALUES = st.one_of(
    st.recursive(
        _SCALARS,
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=8,
    ),
    st.integers(10, 200).map(_nested),
)


@dataclasses.dataclass(frozen=True)
class Body:
    raw: bytes
    #: Known beforehand to be refused (duplicate key, not UTF-8, required field dropped...).
    must_fail: bool
    description: str


def _slots(value: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key-or-index) inside `value`, depth first."""
    if isinstance(value, dict):
        for key in list(value):
            yield value, key
            yield from _slots(value[key])
    elif isinstance(value, list):
        for index in range(len(value)):
            yield value, index
            yield from _slots(value[index])


def _required_slots(hook: catalog.Hook, body: dict[str, Any]) -> list[tuple[Any, Any]]:
    """The required fields still present in `body`, as (container, key)."""
    slots: list[tuple[Any, Any]] = [(body, "apiVersion"), (body, "kind"), (body, "cluster")]
    slots += [(body, field) for field in hook.version_fields]
    cluster = body.get("cluster")
    if isinstance(cluster, dict):
        slots.append((cluster, "metadata"))
        metadata = cluster.get("metadata")
        if isinstance(metadata, dict):
            slots += [(metadata, "name"), (metadata, "namespace")]
    return [(container, key) for container, key in slots if key in container]


def _encode(value: Any, duplicate_in: Any = None) -> str:
    """JSON text of `value`; the object `duplicate_in` gets its first key written twice."""
    if isinstance(value, dict):
        items = list(value.items())
        if value is duplicate_in and items:
            items.append(items[0])
        return (
            "{" + ", ".join(f"{json.dumps(k)}: {_encode(v, duplicate_in)}" for k, v in items) + "}"
        )
    if isinstance(value, list):
        return "[" + ", ".join(_encode(v, duplicate_in) for v in value) + "]"
    return json.dumps(value)


_OPERATIONS = ["drop-required", "drop", "replace", "add", "odd-string", "odd-key"]


def _mutate(draw: st.DrawFn, hook: catalog.Hook, body: dict[str, Any]) -> tuple[str, Any]:
    """Mutate `body` in place at one place; say what was done and which required slot went."""
    operation = draw(st.sampled_from(_OPERATIONS))
    if operation == "drop-required":
        required = _required_slots(hook, body)
        if not required:
            return "nothing left to drop", None
        container, key = draw(st.sampled_from(required))
        del container[key]
        return f"dropped required {key}", (container, key)
    slots = list(_slots(body))
    if operation == "odd-string":
        # Strings keep their type but not their sanity: what a type check lets through.
        slots = [(c, k) for c, k in slots if isinstance(c[k], str)]
    elif operation in ("odd-key", "drop", "add"):
        slots = [(c, k) for c, k in slots if isinstance(c, dict)]
    if not slots:
        return f"no place to {operation}", None
    container, key = draw(st.sampled_from(slots))
    if operation == "odd-string":
        container[key] = draw(_ODD_TEXT)
    elif operation == "odd-key":
        container[draw(_ODD_TEXT)] = container.pop(key)
    elif operation == "drop":
        del container[key]
    elif operation == "add":
        container[draw(st.text(max_size=12))] = draw(JSON_VALUES)
    else:
        container[key] = draw(JSON_VALUES)
    return f"{operation} at {key!r}"[:80], None


def _to_bytes(draw: st.DrawFn, body: dict[str, Any]) -> tuple[bytes, bool, str]:
    """Encode `body`, maybe breaking the encoding; say if the bytes must be refused."""
    encoding = draw(st.sampled_from(["plain", "utf8", "duplicate-key", "non-utf8", "truncated"]))
    objects = [v for _, v in [(None, body), *_slots(body)] if isinstance(v, dict) and v]
    if encoding == "duplicate-key" and objects:
        return _encode(body, draw(st.sampled_from(objects))).encode(), True, encoding
    # ensure_ascii=False writes lone surrogates as such: surrogatepass makes them bytes that
    # are not UTF-8, which the server must refuse too.
    raw = json.dumps(body, ensure_ascii=encoding == "plain").encode("utf-8", "surrogatepass")
    must_fail = False
    if encoding == "non-utf8":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + bytes([draw(st.integers(0x80, 0xFF))]) + raw[at:]
    elif encoding == "truncated":
        # No prefix of an object's JSON text is valid JSON.
        raw = raw[: draw(st.integers(0, max(0, len(raw) - 1)))]
        must_fail = True
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        must_fail = True
    return raw, must_fail, encoding


@st.composite
def mutated_requests(draw: st.DrawFn, hook: catalog.Hook) -> Body:
    """A CAPI request for `hook`, mutated at one to three places, then encoded."""
    make_cluster = draw(st.sampled_from([capi.cluster_v1beta2, capi.cluster_v1beta1]))
    body = capi.hook_request(hook.name, make_cluster())
    notes = []
    dropped = []
    for _ in range(draw(st.integers(1, 3))):
        note, slot = _mutate(draw, hook, body)
        notes.append(note)
        dropped += [slot] if slot else []
    # A later mutation may have put a dropped field back (an "add" of the same name).
    must_fail = any(key not in container for container, key in dropped)
    raw, refused, encoding = _to_bytes(draw, body)
    return Body(raw, must_fail or refused, "; ".join([*notes, encoding]))


RAW_BODIES = st.one_of(
    st.binary(max_size=256),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.integers(65, 3000).map(lambda d: b'{"x": ' + b"[" * d + b"]" * d + b"}"),
)


def check_hook_answer(hook: catalog.Hook, body: Any) -> None:
    """Assert `body` is a valid answer of `hook`, as CAPI's runtime client decodes it."""
    expected_keys = {"apiVersion", "kind", "status"} | (
        {"retryAfterSeconds"} if hook.blocking else set()
    )
    assert isinstance(body, dict), body
    assert expected_keys <= set(body) <= expected_keys | {"message"}, sorted(body)
    assert body["apiVersion"] == catalog.API_VERSION
    assert body["kind"] == hook.response_kind
    assert body["status"] in ("Success", "Failure")
    if hook.blocking:
        retry = body["retryAfterSeconds"]
        assert type(retry) is int and 0 <= retry <= catalog.MAX_RETRY_AFTER_SECONDS, retry
    message = body.get("message", "")
    assert isinstance(message, str)
    # CAPI copies messages into conditions: a huge field must never be echoed back.
    assert len(message) <= 300, f"message of {len(message)} characters"
    if body["status"] == "Failure":
        assert message, "a Failure names its reason"
