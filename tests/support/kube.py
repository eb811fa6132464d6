"""A Kubernetes API emulator that the official `kubernetes` client reaches over HTTP.

Tests of the Kubernetes steps and of `workflows.kube.k8s` talk to this server through an ordinary
kubeconfig (`KubeEmulator.kubeconfig`), so nothing in the client is patched. It keeps objects
in memory and behaves like kube-apiserver where our steps depend on it: metadata filled on
create (uid, a resourceVersion counter shared by all objects, creationTimestamp, namespace,
generation), 201 on create, generateName, 409 on a stale resourceVersion, an isolated status
subresource, server-side apply that creates or merges, JSON merge and JSON patch, label and
field selectors on list and watch, watches that resume from a resourceVersion, end on
`timeoutSeconds`, report 410 for a compacted one and "too large resource version" for one
newer than the store (after `restore`, an etcd restore), kube-apiserver's `Status` bodies,
and bearer-token authentication once a test names the tokens it accepts (401 otherwise).
What every cluster runs always runs here too: DELETE with finalizers and propagation, the
namespace controller and the garbage collector (`kube_lifecycle`), and CustomResourceDefinitions
served once accepted and established (`kube_crds`). Other controllers are switched on by
a test (`add_controller`; `kube_apps`, `kube_storage`, `kube_workloads` for kube-scheduler
and the kubelet, `kube_jobs` for Jobs, ...); the rest tests play
(`set_status`, `put_object`, `set_pod_log`).

Why self-written on aiohttp rather than a layer on kmock 0.8 (see
/work/shared/notes/k8s-emulator.md): kmock's `KubernetesEmulator` changes its store in its
own `_handle` before any override sees the request (200 on create, no metadata, no 409, no
status isolation), its path parser fails on Namespaces and generateName, every request
re-scans a growing request log, and it swaps aiohttp's process-wide resolver while running.
A layer would have replaced nearly every method of a v0 library's internals; owning the
whole server is less code to trust. This module is the transport (thread, event loop,
aiohttp routes, watch streams, injected faults) and the helpers tests call;
`kube_store` holds the objects and kube-apiserver's rules for them, `kube_views` the
answers made of them (lists, watches, discovery), `kube_semantics` the pure parts
(selectors, patches, Status bodies).

The server runs on its own event loop in a daemon thread. Every helper that reads or
changes state runs in that loop, so helpers are thread-safe and changes reach watchers.
Known gaps: strategic merge patch is treated as a JSON merge patch (lists are replaced, not
merged); server-side apply keeps no field ownership (no managedFields, no conflicts between
managers); no admission but NamespaceLifecycle's, no schema, defaulting, RBAC or version
conversion (the versions of a group share one store, only apiVersion is rewritten); no
namespace `/finalize` endpoint and no graceful deletion of Pods; list ignores `limit`.

For the helm CLI (client-go), `/openapi/v3` (`kube_openapi`) tells it the server validates
fields, and Secrets may arrive in protobuf (`kube_protobuf`), as helm stores its releases.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from aiohttp import web

from tests.support import (
    kube_crds,
    kube_eviction,
    kube_lifecycle,
    kube_openapi,
    kube_protobuf,
    kube_views,
)
from tests.support.kube_resources import Resource
from tests.support.kube_semantics import JSON, ApiError
from tests.support.kube_store import Change, Controller, Store

T = TypeVar("T")

#: kube-apiserver ends a watch without timeoutSeconds after 30-60 minutes.
DEFAULT_WATCH_SECONDS = 1800.0


#: How long a watch from a resourceVersion newer than the store waits for it before it
#: fails: apiserver storage/cacher watch_cache.go blockTimeout (3 s).
FRESH_WAIT_SECONDS = 3.0


@dataclasses.dataclass
class _Fault:
    """An injected answer: a failure `code`, a canned `answer`, or a `delay` before the real one."""

    method: str
    path: re.Pattern[str]
    remaining: int
    code: int | None = None
    delay: float = 0.0
    headers: dict[str, str] | None = None
    details: JSON | None = None
    answer: Callable[[], web.StreamResponse] | None = None


class _Canned(Exception):
    """Answer with this response instead of serving the request."""

    def __init__(self, response: web.StreamResponse) -> None:
        super().__init__("canned answer")
        self.response = response


class KubeEmulator:
    """The emulated API server: state, HTTP handling and the helpers tests call."""

    def __init__(self) -> None:
        self.server_version = "v1.33.1"
        #: (method, path with query) of the latest requests, newest last.
        self.requests: collections.deque[tuple[str, str]] = collections.deque(maxlen=1000)
        self.port = 0
        self._crds = kube_crds.CRDControllers()
        self._store = Store(
            system=[
                kube_lifecycle.NamespaceController(),
                kube_lifecycle.GarbageCollector(),
                self._crds,
            ]
        )
        self._faults: list[_Fault] = []
        #: Bearer tokens accepted; empty accepts any (no authentication).
        self._tokens: set[str] = set()
        self.fresh_wait_seconds = FRESH_WAIT_SECONDS
        self._runner: web.AppRunner | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="kube-emulator", daemon=True
        )
        self._thread.start()

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
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=30)
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
        self._call(self._store.resources.__setitem__, (group, version, plural), res)

    def undeclare(self, group: str, version: str, plural: str) -> None:
        """Stop serving one version of a resource (its objects stay for other versions)."""
        self._call(self._store.resources.pop, (group, version, plural), None)

    def put_object(self, obj: JSON) -> JSON:
        """Store `obj` as given (status included), filling metadata; emits ADDED or MODIFIED."""
        return self._call(self._store.put_object, copy.deepcopy(obj))

    def get_object(
        self, group: str, version: str, plural: str, namespace: str | None, name: str
    ) -> JSON | None:
        return self._call(self._store.get_object, group, version, plural, namespace or "", name)

    def list_objects(
        self, group: str, version: str, plural: str, namespace: str | None = None
    ) -> list[JSON]:
        """Every stored object of a resource (in `namespace` if given), by namespace and name."""
        return self._call(self._store.list_objects, group, version, plural, namespace)

    def delete_object(
        self, group: str, version: str, plural: str, namespace: str | None, name: str
    ) -> None:
        """Remove the object at once, finalizers or not (not what DELETE does: `delete`)."""
        self._call(self._store.delete_object, group, version, plural, namespace or "", name)

    def delete(  # noqa: PLR0917 (the order kube-apiserver's paths use)
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str | None,
        name: str,
        propagation: str | None = None,
    ) -> JSON:
        """kube-apiserver's DELETE: finalizers hold the object, dependents follow the policy."""

        def run() -> JSON:
            res = self._store.served(group, version, plural)
            return kube_lifecycle.delete(self._store, res, namespace or "", name, propagation)

        return self._call(run)

    def set_crd_establish_delay(self, seconds: float) -> None:
        """How long a new CRD waits between its names accepted and Established (reset: 0)."""
        self._call(setattr, self._crds, "establish_delay", seconds)

    def set_status(  # noqa: PLR0917 (the order kube-apiserver's paths use)
        self, group: str, version: str, plural: str, namespace: str | None, name: str, status: JSON
    ) -> JSON:
        """Merge `status` into the object's status as a controller would: new rv, MODIFIED."""
        resource = (group, version, plural)
        return self._call(
            self._store.set_status, resource, namespace or "", name, copy.deepcopy(status)
        )

    def set_pod_log(self, namespace: str, name: str, text: str, container: str = "") -> None:
        """What `GET .../pods/<name>/log` answers for that pod's container ("": its only one)."""
        self._call(self._store.logs.__setitem__, (namespace, name, container), text)

    def fail_next(
        self,
        method: str,
        path_regex: str,
        code: int,
        times: int = 1,
        *,
        retry_after: str | None = None,
        details: JSON | None = None,
    ) -> None:
        """Answer the next `times` requests matching method ("*": any) and path with `code`:
        a Status with `details` (e.g. retryAfterSeconds), and a Retry-After header if given."""
        headers = {"Retry-After": retry_after} if retry_after is not None else None
        fault = _Fault(
            method.upper(),
            re.compile(path_regex),
            times,
            code=code,
            headers=headers,
            details=details,
        )
        self._call(self._faults.append, fault)

    def throttle_next(
        self, method: str, path_regex: str, retry_after: str = "1", times: int = 1
    ) -> None:
        """Refuse the next `times` matching requests as priority and fairness (and
        max-in-flight) do: 429, a Retry-After header and a plain-text body, not a Status
        (apiserver server/filters/priority-and-fairness.go and maxinflight.go
        tooManyRequests: `http.Error(w, "Too many requests, please try again later.", 429)`).
        """

        def answer() -> web.StreamResponse:
            return web.Response(
                status=429,
                text="Too many requests, please try again later.\n",
                headers={"Retry-After": retry_after, "X-Content-Type-Options": "nosniff"},
            )

        fault = _Fault(method.upper(), re.compile(path_regex), times, answer=answer)
        self._call(self._faults.append, fault)

    def fail_next_watch(
        self, path_regex: str, code: int, *, reason: str | None = None, details: JSON | None = None
    ) -> None:
        """Answer the next watch of a matching collection 200, then one ERROR event with this
        Status and the end of the stream: how kube-apiserver reports what goes wrong once a
        watch is admitted (apiserver storage/cacher/cacher.go Watch, `newErrWatcher`)."""
        status = ApiError(code, f"injected by the test: {code}", reason=reason, details=details)

        def answer() -> web.StreamResponse:
            event = {"type": "ERROR", "object": status.status()}
            return web.Response(
                body=json.dumps(event).encode() + b"\n", content_type="application/json"
            )

        fault = _Fault("WATCH", re.compile(path_regex), 1, answer=answer)
        self._call(self._faults.append, fault)

    def end_next_watch(self, path_regex: str, times: int = 1) -> None:
        """Answer the next `times` watches of a matching collection 200 with no event at all,
        as a server (or a proxy before it) that closes watches at once."""

        def answer() -> web.StreamResponse:
            return web.Response(body=b"", content_type="application/json")

        fault = _Fault("WATCH", re.compile(path_regex), times, answer=answer)
        self._call(self._faults.append, fault)

    def accept_tokens(self, *tokens: str) -> None:
        """Authenticate requests: only these bearer tokens are accepted (none given: any).

        A request without one of them is answered as kube-apiserver's authentication filter
        answers it: 401, reason Unauthorized, message "Unauthorized"
        (apiserver endpoints/filters/authentication.go `Unauthorized`).
        """
        self._call(self._set_tokens, set(tokens))

    def snapshot(self) -> Any:
        """The store as an etcd snapshot keeps it, for `restore`."""
        return self._call(self._store.snapshot)

    def restore(self, snapshot: Any) -> None:
        """Restore an etcd snapshot: objects and resourceVersion go back, open watches end."""
        self._call(self._store.restore, snapshot)

    def delay_next(self, method: str, path_regex: str, seconds: float, times: int = 1) -> None:
        """Answer the next `times` matching requests only after `seconds` (client timeouts)."""
        fault = _Fault(method.upper(), re.compile(path_regex), times, delay=seconds)
        self._call(self._faults.append, fault)

    def add_controller(self, controller: Controller) -> None:
        """Switch a controller on until the next `reset` (see `kube_store.Controller`); one
        with a `start(store)` method gets it called, to catch up with existing objects."""
        self._call(self._store.controllers.append, controller)
        start = getattr(controller, "start", None)
        if start is not None:
            self._call(start, self._store)

    def in_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` in the server's loop: what a controller's test helper changes."""
        return self._call(fn, *args)

    def compact(self) -> None:
        """Forget the watch history, so a watch from an older resourceVersion answers 410."""
        self._call(self._store.compact)

    # --- in the server's loop ---------------------------------------------------------

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        async def run() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    def _reset(self) -> None:
        self._store.reset()
        self._faults.clear()
        self._tokens = set()
        self.fresh_wait_seconds = FRESH_WAIT_SECONDS
        self.requests.clear()

    def _set_tokens(self, tokens: set[str]) -> None:
        self._tokens = tokens

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
        self._store.close_watches()
        if runner is not None:
            await runner.cleanup()

    async def _close(self) -> None:
        await self._stop()
        # Requests still held by delay_next would otherwise die pending with the loop.
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        try:
            self._authenticate(request)
            await self._inject_fault(request)
            return await self._route(request)
        except _Canned as canned:
            return canned.response
        except ApiError as exc:
            return _failure(exc)

    def _authenticate(self, request: web.Request) -> None:
        if not self._tokens:
            return
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or token not in self._tokens:
            raise ApiError(401, "Unauthorized")

    async def _inject_fault(self, request: web.Request) -> None:
        """Apply the first matching fault: answer in its place, or delay the real answer."""
        watching = request.method == "GET" and request.query.get("watch") in ("true", "1")
        for fault in self._faults:
            method = "WATCH" if watching and fault.method == "WATCH" else request.method
            if fault.method in ("*", method) and fault.path.search(request.path):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                if fault.answer is not None:
                    raise _Canned(fault.answer())
                if fault.code is not None:
                    error = ApiError(
                        fault.code, f"injected by the test: {fault.code}", details=fault.details
                    )
                    raise _Canned(_failure(error, fault.headers))
                await asyncio.sleep(fault.delay)
                return

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [part for part in request.path.split("/") if part]
        if parts == ["version"]:
            return web.json_response(self._version())
        if parts[:2] == ["openapi", "v3"]:
            return web.json_response(self._openapi_v3(parts[2:]))
        if parts and parts[0] in ("api", "apis") and len(parts) <= 3 - (parts[0] == "api"):
            return web.json_response(kube_views.discovery(self._store, parts))
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
        res = self._store.served(group, version, rest[0])
        if len(rest) > 3 or (namespace and not res.namespaced):
            raise ApiError(404, "the server could not find the requested resource")
        name, sub = [*rest[1:], None, None][:2]
        return await self._dispatch(request, res, namespace, name, sub)

    async def _dispatch(
        self, request: web.Request, res: Resource, ns: str, name: str | None, sub: str | None
    ) -> web.StreamResponse:
        method, query = request.method, request.query
        if name is None:
            if method == "GET" and query.get("watch") in ("true", "1"):
                return await self._watch(request, res, ns)
            if method == "GET":
                return web.json_response(kube_views.list_answer(self._store, res, ns, query))
            if method == "POST":
                obj = await self._body(request)
                return web.json_response(self._store.create(res, ns, obj), status=201)
        elif sub is None or (sub == "status" and res.status):
            status_only = sub == "status"
            if method == "GET":
                return web.json_response(
                    self._store.present(res, self._store.existing(res, ns, name))
                )
            if method == "PUT":
                obj = await self._body(request)
                return web.json_response(self._store.replace(res, ns, name, obj, status_only))
            if method == "PATCH":
                answer, code = self._store.patch(
                    res,
                    ns,
                    name,
                    status_only=status_only,
                    content_type=request.content_type,
                    raw=await request.read(),
                    field_manager=request.query.get("fieldManager", ""),
                )
                return web.json_response(answer, status=code)
            if method == "DELETE" and not status_only:
                policy = await self._propagation(request)
                answer = kube_lifecycle.delete(self._store, res, ns, name, policy)
                return web.json_response(answer)
        elif sub == "eviction" and res.kind == "Pod" and method == "POST":
            answer = kube_eviction.evict(self._store, ns, name, await self._body(request))
            return web.json_response(answer, status=201)
        elif sub == "log" and res.kind == "Pod" and method == "GET":
            text = kube_views.pod_log(self._store, res, ns, name, query)
            return web.Response(text=text, content_type="text/plain")
        else:
            raise ApiError(404, "the server could not find the requested resource")
        raise ApiError(405, f"the server does not allow this method on {res.qualified}")

    async def _propagation(self, request: web.Request) -> str | None:
        """DeleteOptions' propagationPolicy (or orphanDependents), from the query or the body."""
        options: JSON = dict(request.query)
        raw = await request.read()
        # client-go may send DeleteOptions in protobuf; helm sends no policy in them.
        if raw.strip() and request.content_type == "application/json":
            try:
                options.update(json.loads(raw))
            except ValueError:
                raise ApiError(400, "the request body is not valid JSON") from None
        policy = options.get("propagationPolicy")
        orphan = options.get("orphanDependents")
        if policy is None and orphan is not None:
            policy = "Orphan" if str(orphan).lower() == "true" else "Background"
        return str(policy) if policy is not None else None

    async def _body(self, request: web.Request) -> JSON:
        if request.content_type == kube_protobuf.CONTENT_TYPE:
            return kube_protobuf.decode(await request.read())
        try:
            body = json.loads(await request.read())
        except ValueError:
            raise ApiError(400, "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be an object")
        return body

    async def _watch(self, request: web.Request, res: Resource, ns: str) -> web.StreamResponse:
        matches = kube_views.matcher(ns, request.query)
        timeout = float(request.query.get("timeoutSeconds") or DEFAULT_WATCH_SECONDS)
        deadline = self._loop.time() + timeout
        since = request.query.get("resourceVersion", "")
        if since.isdigit() and int(since) > self._store.rv:
            backlog = await self._too_large(int(since))
        else:
            backlog = []
        # The backlog is computed and the queue registered with no await in between, so no
        # change can fall between them.
        backlog = backlog or list(kube_views.backlog(self._store, res, since, matches))
        queue: asyncio.Queue[Change | None] = asyncio.Queue()
        self._store.watchers.add(queue)
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
                for event in kube_views.event(self._store, res, change, matches):
                    await response.write(json.dumps(event).encode() + b"\n")
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away
        finally:
            self._store.watchers.discard(queue)
        return response

    async def _too_large(self, since: int) -> list[JSON]:
        """A watch from a resourceVersion the store has not reached (an etcd restore took it
        back): the watch cache waits `fresh_wait_seconds` for it, then fails the watch with
        a Timeout whose cause is ResourceVersionTooLarge (apiserver storage/cacher
        watch_cache.go waitUntilFreshAndBlock, storage/errors.go
        NewTooLargeResourceVersionError; errors.NewTimeoutError: 504, "Timeout: ...")."""
        deadline = self._loop.time() + self.fresh_wait_seconds
        while since > self._store.rv and self._loop.time() < deadline:
            await asyncio.sleep(0.02)
        if since <= self._store.rv:
            return []
        error = ApiError(
            504,
            f"Timeout: Too large resource version: {since}, current: {self._store.rv}",
            reason="Timeout",
            details={
                "causes": [
                    {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                ],
                "retryAfterSeconds": 1,
            },
        )
        return [{"type": "ERROR", "object": error.status()}]

    def _openapi_v3(self, parts: list[str]) -> JSON:
        resources = self._store.resources.values()
        if not parts:
            return kube_openapi.index(resources, self.server_version)
        return kube_openapi.document(resources, "/".join(parts), self.server_version)

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


def _failure(error: ApiError, headers: dict[str, str] | None = None) -> web.StreamResponse:
    """A failure Status; a 429 says when to come back (Retry-After: 1 unless told)."""
    if headers is None and error.code == 429:
        headers = {"Retry-After": "1"}
    return web.json_response(error.status(), status=error.code, headers=headers)


def eventually(what: str, check: Callable[[], object], timeout: float = 5.0) -> None:
    """Wait until `check()` is true: the emulator's controllers act just after each change."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.02)


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
