"""A Kubernetes API emulator that the official `kubernetes` client reaches over HTTP.

Tests of the Kubernetes steps and of `workflows.k8s` talk to this server through an ordinary
kubeconfig (`KubeEmulator.kubeconfig`), so nothing in the client is patched. It keeps objects
in memory and behaves like kube-apiserver where our steps depend on it: metadata filled on
create (uid, a resourceVersion counter shared by all objects, creationTimestamp, namespace,
generation), 201 on create, generateName, 409 on a stale resourceVersion, an isolated status
subresource, server-side apply that creates or merges, JSON merge and JSON patch, label and
field selectors on list and watch, watches that resume from a resourceVersion, end on
`timeoutSeconds` and report 410 for a compacted one, and kube-apiserver's `Status` bodies.
No controller runs: tests play them (`set_status`, `put_object`, `set_pod_log`).

Why self-written on aiohttp rather than a layer on kmock 0.8 (see
/work/shared/notes/k8s-emulator.md): kmock's `KubernetesEmulator` changes its store in its
own `_handle` before any override sees the request (200 on create, no metadata, no 409, no
status isolation), its path parser fails on Namespaces and generateName, every request
re-scans a growing request log, and it swaps aiohttp's process-wide resolver while running.
A layer would have replaced nearly every method of a v0 library's internals; owning the
whole server (this module plus `kube_semantics`) is less code to trust.

The server runs on its own event loop in a daemon thread. Every helper that reads or
changes state runs in that loop, so helpers are thread-safe and changes reach watchers.
Known gaps: strategic merge patch is treated as a JSON merge patch (lists are replaced, not
merged); server-side apply keeps no field ownership (no managedFields, no conflicts between
managers); no admission, schema, RBAC, garbage collection or version conversion (the
versions of a group share one store, only apiVersion is rewritten); deleting a Namespace
removes it and its objects at once, with no Terminating phase; list ignores `limit`.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import datetime
import json
import re
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from aiohttp import web

from tests.support.kube_semantics import (
    JSON,
    ApiError,
    field_selector_matches,
    fold_string_data,
    json_patch,
    label_selector_matches,
    merge_patch,
)

T = TypeVar("T")

#: How many changes the watch history keeps; a watch from before them answers 410.
HISTORY = 5000
#: kube-apiserver ends a watch without timeoutSeconds after 30-60 minutes.
DEFAULT_WATCH_SECONDS = 1800.0
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # generateName's alphabet (no vowels, no 0/1/3)
_DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public")


@dataclasses.dataclass(frozen=True)
class Resource:
    """One served resource: group/version/plural, its kind, scope and status subresource."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        # How kube-apiserver names a resource in messages: `secrets`, `clusters.cluster.x-k8s.io`.
        return f"{self.plural}.{self.group}" if self.group else self.plural


BUILTINS: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "Namespace", namespaced=False),
    Resource("", "v1", "secrets", "Secret", namespaced=True, status=False),
    Resource("", "v1", "configmaps", "ConfigMap", namespaced=True, status=False),
    Resource("", "v1", "pods", "Pod", namespaced=True),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True, status=False),
    Resource("", "v1", "events", "Event", namespaced=True, status=False),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", namespaced=True),
    Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False),
    Resource("apps", "v1", "deployments", "Deployment", namespaced=True),
    Resource("apps", "v1", "statefulsets", "StatefulSet", namespaced=True),
    Resource("apps", "v1", "daemonsets", "DaemonSet", namespaced=True),
    Resource("batch", "v1", "jobs", "Job", namespaced=True),
    *(
        Resource("rbac.authorization.k8s.io", "v1", plural, kind, namespaced, status=False)
        for plural, kind, namespaced in (
            ("clusterroles", "ClusterRole", False),
            ("clusterrolebindings", "ClusterRoleBinding", False),
            ("roles", "Role", True),
            ("rolebindings", "RoleBinding", True),
        )
    ),
    Resource("events.k8s.io", "v1", "events", "Event", namespaced=True, status=False),
    Resource("cluster.x-k8s.io", "v1beta2", "clusters", "Cluster", namespaced=True),
    Resource("cluster.x-k8s.io", "v1beta1", "clusters", "Cluster", namespaced=True),
    Resource("snapshot.storage.k8s.io", "v1", "volumesnapshots", "VolumeSnapshot", True),
    Resource(
        "snapshot.storage.k8s.io", "v1", "volumesnapshotclasses", "VolumeSnapshotClass", False
    ),
    Resource(
        "snapshot.storage.k8s.io", "v1", "volumesnapshotcontents", "VolumeSnapshotContent", False
    ),
    Resource("velero.io", "v1", "backups", "Backup", namespaced=True),
)

# Objects of all versions of a group's resource share a store: (group, plural, namespace, name).
Key = tuple[str, str, str, str]


@dataclasses.dataclass
class _Change:
    """One change, kept for watches: the object before (None on create) and after."""

    rv: int
    type: str
    group: str
    plural: str
    old: JSON | None
    new: JSON


@dataclasses.dataclass
class _Fault:
    method: str
    path: re.Pattern[str]
    code: int
    remaining: int


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


def _not_found(res: Resource, name: str) -> ApiError:
    return ApiError(
        404,
        f'{res.qualified} "{name}" not found',
        details={"name": name, "group": res.group, "kind": res.plural},
    )


def _success(res: Resource, obj: JSON) -> JSON:
    meta = _meta(obj)
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": meta.get("name"),
            "group": res.group,
            "kind": res.plural,
            "uid": meta.get("uid"),
        },
    }


def _spec_part(obj: JSON) -> JSON:
    # What counts for metadata.generation: everything but metadata and status.
    return {key: value for key, value in obj.items() if key not in ("metadata", "status")}


class KubeEmulator:
    """The emulated API server: state, HTTP handling and the helpers tests call."""

    def __init__(self) -> None:
        self.server_version = "v1.33.1"
        #: (method, path with query) of the latest requests, newest last.
        self.requests: collections.deque[tuple[str, str]] = collections.deque(maxlen=1000)
        self.port = 0
        self._resources: dict[tuple[str, str, str], Resource] = {}
        self._objects: dict[Key, JSON] = {}
        self._rv = 0
        self._history: collections.deque[_Change] = collections.deque(maxlen=HISTORY)
        self._compacted_rv = 0
        self._watchers: set[asyncio.Queue[_Change | None]] = set()
        self._faults: list[_Fault] = []
        self._logs: dict[tuple[str, str], str] = {}
        self._runner: web.AppRunner | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="kube-emulator", daemon=True
        )
        self._thread.start()
        self._call(self._reset)

    # --- lifecycle (any thread) --------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    def start(self) -> None:
        """Serve (again) on the same port; state survives `stop()` like etcd behind a restart."""
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)

    def stop(self) -> None:
        """Close the port and every open watch, as an API server that went away."""
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def reset(self) -> None:
        """Forget objects, faults, logs and declarations; serve the built-ins again."""
        self._call(self._reset)
        if not self.running:
            self.start()

    def kubeconfig(self, path: Path | str | None = None) -> JSON:
        """An ordinary kubeconfig pointing at the emulator, also written to `path` if given."""
        config: JSON = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "emulator-token"}}],
            "contexts": [
                {
                    "name": "emulator",
                    "context": {"cluster": "emulator", "user": "tester", "namespace": "default"},
                }
            ],
            "current-context": "emulator",
        }
        if path is not None:
            Path(path).write_text(yaml.safe_dump(config))
        return config

    # --- test helpers (any thread; they run in the server's loop) ----------------------

    def declare(  # noqa: PLR0917 (the order kube-apiserver's paths use)
        self,
        group: str,
        version: str,
        plural: str,
        kind: str,
        namespaced: bool,
        status: bool = True,
    ) -> None:
        res = Resource(group, version, plural, kind, namespaced, status)
        self._call(self._resources.__setitem__, (group, version, plural), res)

    def undeclare(self, group: str, version: str, plural: str) -> None:
        """Stop serving one version of a resource (its objects stay for other versions)."""
        self._call(self._resources.pop, (group, version, plural), None)

    def put_object(self, obj: JSON) -> JSON:
        """Store `obj` as given (status included), filling metadata; emits ADDED or MODIFIED."""
        return self._call(self._put_object, copy.deepcopy(obj))

    def get_object(
        self, group: str, version: str, plural: str, namespace: str | None, name: str
    ) -> JSON | None:
        return self._call(self._get_object, group, version, plural, namespace or "", name)

    def list_objects(
        self, group: str, version: str, plural: str, namespace: str | None = None
    ) -> list[JSON]:
        """Every stored object of a resource (in `namespace` if given), by namespace and name."""
        return self._call(self._list_objects, group, version, plural, namespace)

    def delete_object(
        self, group: str, version: str, plural: str, namespace: str | None, name: str
    ) -> None:
        self._call(self._delete_object, group, version, plural, namespace or "", name)

    def set_status(  # noqa: PLR0917 (the order kube-apiserver's paths use)
        self, group: str, version: str, plural: str, namespace: str | None, name: str, status: JSON
    ) -> JSON:
        """Merge `status` into the object's status as a controller would: new rv, MODIFIED."""
        resource = (group, version, plural)
        return self._call(self._set_status, resource, namespace or "", name, copy.deepcopy(status))

    def set_pod_log(self, namespace: str, name: str, text: str) -> None:
        """What `GET .../pods/<name>/log` answers for that pod."""
        self._call(self._logs.__setitem__, (namespace, name), text)

    def fail_next(self, method: str, path_regex: str, code: int, times: int = 1) -> None:
        """Answer the next `times` requests matching method ("*": any) and path with `code`."""
        fault = _Fault(method.upper(), re.compile(path_regex), code, times)
        self._call(self._faults.append, fault)

    def compact(self) -> None:
        """Forget the watch history, so a watch from an older resourceVersion answers 410."""
        self._call(self._compact)

    # --- state (server loop only) ------------------------------------------------------

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        async def run() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    def _reset(self) -> None:
        self._close_watches()
        self._objects.clear()
        self._history.clear()
        self._compacted_rv = self._rv
        self._faults.clear()
        self._logs.clear()
        self._resources = {(r.group, r.version, r.plural): r for r in BUILTINS}
        for name in _DEFAULT_NAMESPACES:
            self._put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def _compact(self) -> None:
        self._history.clear()
        self._compacted_rv = self._rv

    def _resource_of(self, api_version: str, kind: str) -> Resource:
        group, _, version = api_version.rpartition("/")
        for res in self._resources.values():
            if (res.group, res.version, res.kind) == (group, version, kind):
                return res
        raise LookupError(f"{api_version} {kind} is not declared; declare() it first")

    def _served(self, group: str, version: str, plural: str) -> Resource:
        res = self._resources.get((group, version, plural))
        if res is None:
            raise ApiError(404, "the server could not find the requested resource")
        return res

    def _present(self, res: Resource, obj: JSON) -> JSON:
        out = copy.deepcopy(obj)
        out["apiVersion"], out["kind"] = res.api_version, res.kind
        return out

    def _commit(self, res: Resource, key: Key, old: JSON | None, new: JSON, kind: str) -> JSON:
        """Give `new` the next resourceVersion, store it (or drop it) and tell watchers."""
        self._rv += 1
        _meta(new)["resourceVersion"] = str(self._rv)
        if kind == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = new
        change = _Change(self._rv, kind, res.group, res.plural, old, copy.deepcopy(new))
        if len(self._history) == self._history.maxlen:
            self._compacted_rv = self._history[0].rv
        self._history.append(change)
        for queue in self._watchers:
            queue.put_nowait(change)
        return new

    def _update(self, res: Resource, key: Key, old: JSON, new: JSON) -> JSON:
        """Store a changed object: no-op writes keep their rv; released deletions complete."""
        new_meta, old_meta = _meta(new), _meta(old)
        for field in ("uid", "creationTimestamp", "name", "namespace", "deletionTimestamp"):
            if field in old_meta:
                new_meta[field] = old_meta[field]
        new_meta["generation"] = old_meta.get("generation", 1) + (
            _spec_part(new) != _spec_part(old)
        )
        if res.kind == "Secret":
            fold_string_data(new)
        new_meta["resourceVersion"] = old_meta.get("resourceVersion")
        if new == old:
            return new
        if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
            return self._remove(res, key, new)
        return self._commit(res, key, old, new, "MODIFIED")

    def _remove(self, res: Resource, key: Key, obj: JSON) -> JSON:
        gone = self._commit(res, key, copy.deepcopy(obj), obj, "DELETED")
        if res.plural == "namespaces" and not res.group:
            # No Terminating phase: a Namespace takes its objects with it at once.
            name = key[3]
            for other in [k for k in self._objects if k[2] == name]:
                group, plural = other[0], other[1]
                owner = next(
                    r for r in self._resources.values() if (r.group, r.plural) == (group, plural)
                )
                self._commit(owner, other, self._objects[other], self._objects[other], "DELETED")
        return gone

    def _admit(self, res: Resource, namespace: str, obj: JSON) -> tuple[Key, JSON]:
        """Fill what kube-apiserver fills on create; the object gets its rv when committed."""
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        meta = _meta(obj)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(
                    422, "metadata.name: Required value: name or generateName is required"
                )
            suffix = "".join(secrets.choice(_NAME_CHARS) for _ in range(5))
            meta["name"] = meta["generateName"] + suffix
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent"
                    " on the request",
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta.setdefault("generation", 1)
        if res.kind == "Secret":
            fold_string_data(obj)
        return (res.group, res.plural, namespace if res.namespaced else "", meta["name"]), obj

    def _put_object(self, obj: JSON) -> JSON:
        res = self._resource_of(obj.get("apiVersion", ""), obj.get("kind", ""))
        key, obj = self._admit(res, _meta(obj).get("namespace") or "", obj)
        old = self._objects.get(key)
        if old is not None:
            for field in ("uid", "creationTimestamp"):
                _meta(obj)[field] = _meta(old)[field]
            return self._present(res, self._commit(res, key, old, obj, "MODIFIED"))
        return self._present(res, self._commit(res, key, None, obj, "ADDED"))

    def _get_object(self, group: str, version: str, plural: str, ns: str, name: str) -> JSON | None:
        res = self._served(group, version, plural)
        obj = self._objects.get((group, plural, ns, name))
        return None if obj is None else self._present(res, obj)

    def _list_objects(
        self, group: str, version: str, plural: str, namespace: str | None
    ) -> list[JSON]:
        res = self._served(group, version, plural)
        return [
            self._present(res, obj)
            for key, obj in sorted(self._objects.items())
            if key[:2] == (group, plural) and namespace in (None, key[2])
        ]

    def _delete_object(self, group: str, version: str, plural: str, ns: str, name: str) -> None:
        res = self._served(group, version, plural)
        key = (group, plural, ns, name)
        if key not in self._objects:
            raise _not_found(res, name)
        self._remove(res, key, copy.deepcopy(self._objects[key]))

    def _set_status(self, resource: tuple[str, str, str], ns: str, name: str, status: JSON) -> JSON:
        res = self._served(*resource)
        key = (res.group, res.plural, ns, name)
        old = self._objects.get(key)
        if old is None:
            raise _not_found(res, name)
        new = copy.deepcopy(old)
        new["status"] = merge_patch(old.get("status") or {}, status)
        return self._present(res, self._commit(res, key, old, new, "MODIFIED"))

    # --- HTTP --------------------------------------------------------------------------

    async def _start(self) -> None:
        if self._runner is not None:
            return
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]
        self._runner = runner

    async def _stop(self) -> None:
        runner, self._runner = self._runner, None
        self._close_watches()
        if runner is not None:
            await runner.cleanup()

    def _close_watches(self) -> None:
        for queue in self._watchers:
            queue.put_nowait(None)
        self._watchers.clear()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        try:
            self._inject_fault(request)
            return await self._route(request)
        except ApiError as exc:
            headers = {"Retry-After": "1"} if exc.code == 429 else None
            return web.json_response(exc.status(), status=exc.code, headers=headers)

    def _inject_fault(self, request: web.Request) -> None:
        for fault in self._faults:
            if fault.method in ("*", request.method) and fault.path.search(request.path):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                raise ApiError(fault.code, f"injected by the test: {fault.code}")

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [part for part in request.path.split("/") if part]
        if parts == ["version"]:
            return web.json_response(self._version())
        if parts and parts[0] in ("api", "apis") and len(parts) <= 3 - (parts[0] == "api"):
            return web.json_response(self._discovery(parts))
        if len(parts) < 3 or parts[0] not in ("api", "apis"):
            raise ApiError(404, "the server could not find the requested resource")
        group, version, rest = (
            ("", parts[1], parts[2:]) if parts[0] == "api" else (parts[1], parts[2], parts[3:])
        )
        namespace = ""
        if (
            len(rest) >= 3
            and rest[0] == "namespaces"
            and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        res = self._served(group, version, rest[0])
        if len(rest) > 3 or (namespace and not res.namespaced):
            raise ApiError(404, "the server could not find the requested resource")
        name, sub = [*rest[1:], None, None][:2]
        return await self._dispatch(request, res, namespace, name, sub)

    async def _dispatch(  # noqa: PLR0911 (one answer per route)
        self, request: web.Request, res: Resource, ns: str, name: str | None, sub: str | None
    ) -> web.StreamResponse:
        method, query = request.method, request.query
        if name is None:
            if method == "GET" and query.get("watch") in ("true", "1"):
                return await self._watch(request, res, ns)
            if method == "GET":
                return web.json_response(self._list(res, ns, query))
            if method == "POST":
                obj = await self._body(request)
                return web.json_response(self._create(res, ns, obj), status=201)
        elif sub is None or (sub == "status" and res.status):
            status_only = sub == "status"
            if method == "GET":
                return web.json_response(self._present(res, self._existing(res, ns, name)))
            if method == "PUT":
                obj = await self._body(request)
                return web.json_response(self._replace(res, ns, name, obj, status_only))
            if method == "PATCH":
                answer, code = await self._patch(request, res, ns, name, status_only)
                return web.json_response(answer, status=code)
            if method == "DELETE" and not status_only:
                return web.json_response(self._delete(res, ns, name))
        elif sub == "log" and res.kind == "Pod" and method == "GET":
            self._existing(res, ns, name)
            text = self._logs.get((ns, name), "")
            if tail := query.get("tailLines"):
                text = "".join(text.splitlines(keepends=True)[-int(tail) :])
            return web.Response(text=text, content_type="text/plain")
        else:
            raise ApiError(404, "the server could not find the requested resource")
        raise ApiError(405, f"the server does not allow this method on {res.qualified}")

    async def _body(self, request: web.Request) -> JSON:
        try:
            body = json.loads(await request.read())
        except ValueError:
            raise ApiError(400, "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be an object")
        return body

    def _existing(self, res: Resource, ns: str, name: str) -> JSON:
        obj = self._objects.get((res.group, res.plural, ns, name))
        if obj is None:
            raise _not_found(res, name)
        return obj

    def _create(self, res: Resource, ns: str, obj: JSON) -> JSON:
        key, obj = self._admit(res, ns, obj)
        if res.namespaced and ("", "namespaces", "", ns) not in self._objects:
            raise ApiError(
                404, f'namespaces "{ns}" not found', details={"name": ns, "kind": "namespaces"}
            )
        if key in self._objects:
            name = key[3]
            raise ApiError(
                409,
                f'{res.qualified} "{name}" already exists',
                reason="AlreadyExists",
                details={"name": name, "group": res.group, "kind": res.plural},
            )
        if res.status:
            # Status belongs to controllers: create resets it, as kube-apiserver does.
            obj.pop("status", None)
        if res.kind == "Namespace" and not res.group:
            obj["status"] = {"phase": "Active"}
        return self._present(res, self._commit(res, key, None, obj, "ADDED"))

    def _check_version(self, res: Resource, old: JSON, new: JSON) -> None:
        wanted = _meta(new).get("resourceVersion")
        if wanted not in (None, "", _meta(old).get("resourceVersion")):
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on {res.qualified} "{_meta(old)["name"]}": the'
                " object has been modified; please apply your changes to the latest version"
                " and try again",
                reason="Conflict",
                details={"name": _meta(old)["name"], "group": res.group, "kind": res.plural},
            )

    def _isolate(self, res: Resource, old: JSON, new: JSON, status_only: bool) -> JSON:
        """The main endpoint cannot change status, and /status changes nothing else."""
        if status_only:
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status")
            return merged
        if res.status:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        return new

    def _replace(self, res: Resource, ns: str, name: str, obj: JSON, status_only: bool) -> JSON:
        old = self._existing(res, ns, name)
        if _meta(obj).get("name") not in (None, name):
            raise ApiError(400, "the name of the object does not match the name on the URL")
        self._check_version(res, old, obj)
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        new = self._isolate(res, old, obj, status_only)
        key = (res.group, res.plural, ns, name)
        return self._present(res, self._update(res, key, old, new))

    async def _patch(
        self, request: web.Request, res: Resource, ns: str, name: str, status_only: bool
    ) -> tuple[JSON, int]:
        kind, raw = request.content_type, await request.read()
        try:
            body = (
                yaml.safe_load(raw) if kind == "application/apply-patch+yaml" else json.loads(raw)
            )
        except (ValueError, yaml.YAMLError):
            raise ApiError(400, f"the body is not valid {kind}") from None
        key = (res.group, res.plural, ns, name)
        old = self._objects.get(key)
        if kind == "application/apply-patch+yaml":
            if not request.query.get("fieldManager"):
                raise ApiError(422, "fieldManager: Required value: is required for apply patch")
            if not isinstance(body, dict):
                raise ApiError(400, "an apply patch must be an object")
            if _meta(body).get("name") not in (None, name):
                raise ApiError(400, "the name of the object does not match the name on the URL")
            if old is None and not status_only:
                _meta(body)["name"] = name
                return self._create(res, ns, body), 201
        if old is None:
            raise _not_found(res, name)
        if kind in (
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",  # lists replaced, not merged: a known gap
            "application/apply-patch+yaml",
        ):
            new = merge_patch(old, body)
        elif kind == "application/json-patch+json":
            new = json_patch(old, body)
        else:
            raise ApiError(415, f"the body of the request was in an unknown format: {kind}")
        self._check_version(res, old, new)
        new = self._isolate(res, old, new, status_only)
        return self._present(res, self._update(res, key, old, new)), 200

    def _delete(self, res: Resource, ns: str, name: str) -> JSON:
        key = (res.group, res.plural, ns, name)
        old = self._existing(res, ns, name)
        if _meta(old).get("finalizers"):
            # Finalizers hold the object, marked, until someone removes them.
            new = copy.deepcopy(old)
            _meta(new).setdefault("deletionTimestamp", _now())
            return self._present(res, self._update(res, key, old, new))
        self._remove(res, key, copy.deepcopy(old))
        return _success(res, old)

    def _matcher(self, ns: str, query: Any) -> Callable[[JSON], bool]:
        labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
        # Parse once now, so a bad selector answers 400 before anything streams.
        label_selector_matches(labels, {})
        field_selector_matches(fields, {})

        def matches(obj: JSON) -> bool:
            meta = _meta(obj)
            return (
                ns in ("", meta.get("namespace"))
                and label_selector_matches(labels, meta.get("labels") or {})
                and field_selector_matches(fields, obj)
            )

        return matches

    def _list(self, res: Resource, ns: str, query: Any) -> JSON:
        matches = self._matcher(ns, query)
        items = [
            self._present(res, obj)
            for key, obj in sorted(self._objects.items())
            if key[:2] == (res.group, res.plural) and matches(obj)
        ]
        return {
            "apiVersion": res.api_version,
            "kind": f"{res.kind}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    def _backlog(
        self, res: Resource, since: str, matches: Callable[[JSON], bool]
    ) -> Iterator[JSON]:
        """What a new watch sends first: current objects, or the changes after `since`."""
        if since in ("", "0"):
            for key, obj in sorted(self._objects.items()):
                if key[:2] == (res.group, res.plural) and matches(obj):
                    yield {"type": "ADDED", "object": self._present(res, obj)}
            return
        if not since.isdigit():
            raise ApiError(400, f"invalid resourceVersion {since!r}")
        if int(since) < self._compacted_rv:
            gone = ApiError(410, f"too old resource version: {since} ({self._compacted_rv})")
            yield {"type": "ERROR", "object": gone.status()}
            return
        for change in self._history:
            if change.rv > int(since):
                yield from self._event(res, change, matches)

    def _event(
        self, res: Resource, change: _Change, matches: Callable[[JSON], bool]
    ) -> Iterator[JSON]:
        # A change that moves an object into or out of a watch's selection is, for that
        # watch, an ADDED or DELETED, as kube-apiserver reports it.
        if (change.group, change.plural) != (res.group, res.plural):
            return
        was = change.old is not None and matches(change.old)
        now = matches(change.new)
        if change.type == "DELETED":
            kind = "DELETED" if was else None
        elif was and now:
            kind = change.type
        else:
            kind = "ADDED" if now else ("DELETED" if was else None)
        if kind is not None:
            yield {"type": kind, "object": self._present(res, change.new)}

    async def _watch(self, request: web.Request, res: Resource, ns: str) -> web.StreamResponse:
        matches = self._matcher(ns, request.query)
        timeout = float(request.query.get("timeoutSeconds") or DEFAULT_WATCH_SECONDS)
        deadline = self._loop.time() + timeout
        # The backlog is computed and the queue registered with no await in between, so no
        # change can fall between them.
        backlog = list(self._backlog(res, request.query.get("resourceVersion", ""), matches))
        queue: asyncio.Queue[_Change | None] = asyncio.Queue()
        self._watchers.add(queue)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            await response.prepare(request)
            for event in backlog:
                await response.write(json.dumps(event).encode() + b"\n")
                if event["type"] == "ERROR":
                    return response
            while (remaining := deadline - self._loop.time()) > 0:
                try:
                    change = await asyncio.wait_for(queue.get(), remaining)
                except TimeoutError:
                    break
                if change is None:
                    break
                for event in self._event(res, change, matches):
                    await response.write(json.dumps(event).encode() + b"\n")
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away
        finally:
            self._watchers.discard(queue)
        return response

    def _version(self) -> JSON:
        major, minor = self.server_version.lstrip("v").split(".")[:2]
        return {
            "major": major,
            "minor": minor,
            "gitVersion": self.server_version,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z",
            "goVersion": "go1.24.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    def _discovery(self, parts: list[str]) -> JSON:
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        groups: dict[str, list[str]] = {}
        for group, version, _ in self._resources:
            if group and version not in groups.setdefault(group, []):
                groups[group].append(version)

        def describe(group: str) -> JSON:
            versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in groups[group]]
            return {"name": group, "versions": versions, "preferredVersion": versions[0]}

        if parts == ["apis"]:
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [describe(g) for g in groups],
            }
        if len(parts) == 2 and parts[0] == "apis":
            if parts[1] not in groups:
                raise ApiError(404, "the server could not find the requested resource")
            return {"kind": "APIGroup", "apiVersion": "v1", **describe(parts[1])}
        group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
        served = [r for r in self._resources.values() if (r.group, r.version) == (group, version)]
        if not served:
            raise ApiError(404, "the server could not find the requested resource")
        resources: list[JSON] = []
        for res in served:
            verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
            entry = {"name": res.plural, "singularName": res.kind.lower(), "kind": res.kind}
            resources.append({**entry, "namespaced": res.namespaced, "verbs": verbs})
            if res.status:
                status_verbs = ["get", "patch", "update"]
                resources.append(
                    {
                        **entry,
                        "name": f"{res.plural}/status",
                        "verbs": status_verbs,
                        "namespaced": res.namespaced,
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }


# --- fixtures (registered for the whole suite by tests/conftest.py) --------------------


@pytest.fixture(scope="session")
def kube_server() -> Iterator[KubeEmulator]:
    """One emulator for the session; use `kube`, which hands it over clean."""
    server = KubeEmulator()
    server.start()
    yield server
    server.close()


@pytest.fixture
def kube(kube_server: KubeEmulator) -> KubeEmulator:
    """The emulator, serving, with only the built-ins and the default namespaces."""
    kube_server.reset()
    return kube_server


@pytest.fixture
def kubeconfig_path(kube: KubeEmulator, tmp_path: Path) -> Path:
    """A kubeconfig file pointing at `kube`."""
    path = tmp_path / "kubeconfig"
    kube.kubeconfig(path)
    return path
