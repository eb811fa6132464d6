"""Parses and validates a hook request body into a `HookCall`.

Every rejection is a `BadRequest` whose message is fixed for a given body (CAPI copies
hook messages into conditions), names the field, and echoes at most a short excerpt of
what was sent. Unknown fields are ignored, so v1beta1 and v1beta2 Clusters both parse.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hooksvc.contract import catalog

#: The most a request may carry; Cluster API's own extension server caps bodies at 20 MiB.
MAX_BODY_BYTES = 20 << 20
#: Deeper JSON than this is refused before Python's recursion limit is near.
MAX_DEPTH = 64
_CLUSTER_GROUP = "cluster.x-k8s.io"
#: Kubernetes' own limits on names (DNS-1123 subdomain) and namespaces (label); hooksvc's
#: columns are sized for them, so a longer value is refused here, not by PostgreSQL.
MAX_NAME = 253
MAX_NAMESPACE = 63
MAX_UID = 253
#: Kubernetes versions are short ("v1.33.0"); the moment key joins two of them.
MAX_VERSION = 64


class BadRequest(Exception):
    """The request is not a valid hook request."""


def cluster_key(uid: str, namespace: str, name: str) -> str:
    """A cluster's identity: its UID, or namespace/name when CAPI sent none."""
    return uid or f"{namespace}/{name}"


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The parts of a CAPI Cluster that hooksvc relies on (v1beta1 and v1beta2 alike)."""

    name: str
    namespace: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
    deletion_timestamp: str
    topology_version: str
    #: The ClusterClass name, from spec.topology.class (v1beta1) or classRef.name (v1beta2).
    class_name: str
    class_namespace: str

    @property
    def key(self) -> str:
        return cluster_key(self.uid, self.namespace, self.name)

    @property
    def has_topology(self) -> bool:
        return bool(self.class_name)


@dataclasses.dataclass(frozen=True)
class HookCall:
    hook: catalog.Hook
    settings: dict[str, str]
    cluster: Cluster
    from_version: str = ""
    to_version: str = ""
    version: str = ""
    control_plane_upgrades: tuple[str, ...] = ()
    workers_upgrades: tuple[str, ...] = ()
    #: UpdateMachine: the Machine's name and desired-spec digest (its moment), and what
    #: the run's steps see of it (hooksvc.contract.machines.update_call).
    update_moment: str = ""
    machine: dict[str, Any] | None = None


def excerpt(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)[:80]
    return json.dumps(text[:64] + ("..." if len(text) > 64 else ""))


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # dict() is C: the Python loop that names the key runs only for a refused body.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BadRequest(f"request body has the key {excerpt(key)} twice")
            seen.add(key)
    return obj


def _check_depth(value: object, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise BadRequest(f"request body is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for item in value.values():
            _check_depth(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_depth(item, depth + 1)


def decode(body: bytes) -> dict[str, Any]:
    """Decode `body` as a JSON object; duplicate keys and extreme nesting are refused."""
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest("request body is larger than 20 MiB")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("request body is not UTF-8") from None
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicates)
    except json.JSONDecodeError as exc:
        raise BadRequest(
            f"request body is not valid JSON: {exc.msg} at character {exc.pos}"
        ) from None
    except RecursionError:
        raise BadRequest(f"request body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        # int() refuses a literal of more than sys.get_int_max_str_digits() digits (4300 by
        # default, CPython's CVE-2020-10735 limit): json.loads raises ValueError, not
        # JSONDecodeError, for it.
        raise BadRequest("request body holds a number with too many digits") from None
    # Nesting is at most the number of brackets: most bodies need no walk (a C count).
    if body.count(b"{") + body.count(b"[") > MAX_DEPTH:
        _check_depth(data)
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return data


def _check_text(text: str, where: str) -> None:
    """Refuse what PostgreSQL cannot store: NUL characters and lone surrogates."""
    if "\x00" in text:
        raise BadRequest(f"{where} must not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{where} must be valid Unicode") from None


def field(
    obj: dict[str, Any],
    key: str,
    kind: type,
    where: str,
    *,
    required: bool = False,
    max_length: int | None = None,
) -> Any:
    value = obj.get(key)
    if value is None:
        if required:
            raise BadRequest(f"{where}{key} is required")
        return kind()
    if not isinstance(value, kind):
        raise BadRequest(f"{where}{key} must be {_KIND_NAMES[kind]}")
    if required and not value:
        raise BadRequest(f"{where}{key} must not be empty")
    if isinstance(value, str):
        _check_text(value, f"{where}{key}")
        if max_length is not None and len(value) > max_length:
            raise BadRequest(f"{where}{key} must be at most {max_length} characters")
    return value


_KIND_NAMES: dict[type, str] = {str: "a string", dict: "an object", list: "an array"}


def string_map(obj: dict[str, Any], key: str, where: str) -> dict[str, str]:
    value: dict[str, Any] = field(obj, key, dict, where)
    for k, v in value.items():
        _check_text(k, f"a key of {where}{key}")
        # The key is echoed in the message: cut it, CAPI copies messages into conditions.
        named = f"{where}{key}.{k[:64]}{'...' if len(k) > 64 else ''}"
        if not isinstance(v, str):
            raise BadRequest(f"{named} must be a string")
        _check_text(v, named)
    return value


def check_type_meta(data: dict[str, Any], kind: str) -> None:
    """Check the request's apiVersion and kind."""
    api_version = data.get("apiVersion")
    if api_version != catalog.API_VERSION:
        raise BadRequest(
            f"apiVersion must be {catalog.API_VERSION!r}, got {excerpt(api_version or '')}"
        )
    if data.get("kind") != kind:
        raise BadRequest(f"kind must be {kind!r}, got {excerpt(data.get('kind') or '')}")


def parse_cluster(value: object) -> Cluster:
    if value is None:
        raise BadRequest("cluster is required")
    if not isinstance(value, dict):
        raise BadRequest("cluster must be an object")
    api_version = field(value, "apiVersion", str, "cluster.")
    if api_version and api_version.split("/")[0] != _CLUSTER_GROUP:
        raise BadRequest(f"cluster.apiVersion must be in group {_CLUSTER_GROUP}")
    kind = field(value, "kind", str, "cluster.")
    if kind and kind != "Cluster":
        raise BadRequest(f"cluster.kind must be 'Cluster', got {excerpt(kind)}")
    meta = field(value, "metadata", dict, "cluster.", required=True)
    spec = field(value, "spec", dict, "cluster.")
    topology = field(spec, "topology", dict, "cluster.spec.")
    class_ref = field(topology, "classRef", dict, "cluster.spec.topology.")
    where = "cluster.spec.topology."
    return Cluster(
        name=field(meta, "name", str, "cluster.metadata.", required=True, max_length=MAX_NAME),
        namespace=field(
            meta, "namespace", str, "cluster.metadata.", required=True, max_length=MAX_NAMESPACE
        ),
        uid=field(meta, "uid", str, "cluster.metadata.", max_length=MAX_UID),
        labels=string_map(meta, "labels", "cluster.metadata."),
        annotations=string_map(meta, "annotations", "cluster.metadata."),
        deletion_timestamp=field(meta, "deletionTimestamp", str, "cluster.metadata."),
        topology_version=field(topology, "version", str, where),
        class_name=field(class_ref, "name", str, where + "classRef.")
        or field(topology, "class", str, where),
        class_namespace=field(class_ref, "namespace", str, where + "classRef.")
        or field(topology, "classNamespace", str, where),
    )


def _upgrade_plan(data: dict[str, Any], key: str) -> tuple[str, ...]:
    steps: list[Any] = field(data, key, list, "")
    versions = []
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            raise BadRequest(f"{key}[{i}] must be an object")
        versions.append(field(step, "version", str, f"{key}[{i}].", max_length=MAX_VERSION))
    return tuple(versions)


def parse_hook_call(hook: catalog.Hook, body: bytes) -> HookCall:
    """Parse `body` as `hook`'s request; raise BadRequest naming the first problem."""
    data = decode(body)
    check_type_meta(data, hook.request_kind)
    versions = {
        f: field(data, f, str, "", required=True, max_length=MAX_VERSION)
        for f in hook.version_fields
    }
    return HookCall(
        hook=hook,
        settings=string_map(data, "settings", ""),
        cluster=parse_cluster(data.get("cluster")),
        from_version=versions.get("fromKubernetesVersion", ""),
        to_version=versions.get("toKubernetesVersion", ""),
        version=versions.get("kubernetesVersion", ""),
        control_plane_upgrades=_upgrade_plan(data, "controlPlaneUpgrades")
        if hook.has_upgrade_plan
        else (),
        workers_upgrades=_upgrade_plan(data, "workersUpgrades") if hook.has_upgrade_plan else (),
    )
