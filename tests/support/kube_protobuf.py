"""Request bodies in Kubernetes' protobuf encoding, read into the JSON the emulator stores.

Why it exists: client-go's typed clients send `application/vnd.kubernetes.protobuf`, and
kube-apiserver accepts it. helm keeps its releases in Secrets through such a client, so its
creates and updates of `sh.helm.release.v1.<release>.v<N>` arrive in protobuf. They accept
a JSON answer (their Accept header lists `application/json` too), so only requests are read.

The encoding: the 4 bytes `k8s\\0`, then a `runtime.Unknown` message (typeMeta = 1 with
apiVersion = 1 and kind = 2; raw = 2 holding the object's own message). Only the kinds
listed in `_DECODERS` are read (Secret: what helm sends); others answer 415, as
kube-apiserver does for a body it cannot decode. Fields are read by their numbers in
k8s.io/api's generated.proto; server-set ones (timestamps, managedFields) are skipped.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator

from tests.support.kube_semantics import JSON, ApiError

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"

_Field = tuple[int, int | bytes]


def _bad(what: str) -> ApiError:
    return ApiError(400, f"the protobuf body could not be decoded: {what}")


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise _bad("truncated varint")
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def fields(buf: bytes) -> Iterator[_Field]:
    """(field number, value) of each field of a message: varints as int, the rest as bytes."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire_type = key >> 3, key & 7
        value: int | bytes
        if wire_type == 0:
            value, i = _varint(buf, i)
        elif wire_type == 2:
            size, i = _varint(buf, i)
            value, i = buf[i : i + size], i + size
        elif wire_type in (1, 5):
            size = 8 if wire_type == 1 else 4
            value, i = buf[i : i + size], i + size
        else:
            raise _bad(f"unsupported wire type {wire_type}")
        if i > len(buf):
            raise _bad("truncated field")
        yield number, value


def _bytes(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise _bad("expected a length-delimited field")
    return value


def _text(value: int | bytes) -> str:
    try:
        return _bytes(value).decode()
    except UnicodeDecodeError:
        raise _bad("a string field is not UTF-8") from None


def _entry(value: int | bytes) -> tuple[str, bytes]:
    """One map<string, ...> entry: key = 1, value = 2."""
    key, item = "", b""
    for number, part in fields(_bytes(value)):
        if number == 1:
            key = _text(part)
        elif number == 2:
            item = _bytes(part)
    return key, item


def object_meta(buf: bytes) -> JSON:
    """ObjectMeta: the fields a client sets (name, namespace, labels, ...)."""
    meta: JSON = {}
    strings = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    for number, value in fields(buf):
        if number in strings:
            meta[strings[number]] = _text(value)
        elif number == 7 and isinstance(value, int):
            meta["generation"] = value
        elif number in (11, 12):
            key, item = _entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = _text(item)
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
    return meta


def _secret(buf: bytes) -> JSON:
    obj: JSON = {}
    for number, value in fields(buf):
        if number == 1:
            obj["metadata"] = object_meta(_bytes(value))
        elif number == 2:
            key, item = _entry(value)
            obj.setdefault("data", {})[key] = base64.b64encode(item).decode()
        elif number == 3:
            obj["type"] = _text(value)
        elif number == 4:
            key, item = _entry(value)
            obj.setdefault("stringData", {})[key] = _text(item)
        elif number == 5 and isinstance(value, int):
            obj["immutable"] = bool(value)
    return obj


_DECODERS: dict[tuple[str, str], Callable[[bytes], JSON]] = {("v1", "Secret"): _secret}


def decode(body: bytes) -> JSON:
    """The object a protobuf request body carries, as JSON with apiVersion and kind."""
    if not body.startswith(_MAGIC):
        raise _bad("no k8s protobuf envelope")
    api_version = kind = ""
    raw = b""
    for number, value in fields(body[len(_MAGIC) :]):
        if number == 1:
            for part_number, part in fields(_bytes(value)):
                if part_number == 1:
                    api_version = _text(part)
                elif part_number == 2:
                    kind = _text(part)
        elif number == 2:
            raw = _bytes(value)
    decoder = _DECODERS.get((api_version, kind))
    if decoder is None:
        raise ApiError(415, f"the emulator cannot decode {api_version} {kind} from protobuf")
    return {"apiVersion": api_version, "kind": kind, **decoder(raw)}
