"""CAPI's topology controller as hooksvc sees it: lifecycle hook calls under CAPI's hook cache.

A fleet of Clusters is driven through create, a chained upgrade and delete the way CAPI's
topology controller calls the lifecycle hooks, for tests and the fleet benchmark
(bench/fleet.py). What it models was read in kubernetes-sigs/cluster-api at ae7ff04
(2026-08; the hook cache came with v1.12.0, commit b81eae5 "Introduce reconciler
rate-limiting and hook caching"):

- The hook cache (`util/cache/cache.go`, `HookEntry`): one entry per hook and Cluster, keyed
  `"<HookName>: <namespace>/<name>"` (the object key, not the uid), holding
  `ReconcileAfter` and the response message. `ShouldRequeue(now)` is true while
  `ReconcileAfter` is after `now`. The cache is made with `HookCacheDefaultTTL` (24 h) and
  expires entries lazily, but an entry whose `ReconcileAfter` has passed no longer stops a call.
- Before each blocking hook (`exp/topology/desiredstate/lifecycle_hooks.go` for
  BeforeClusterUpgrade, Before/AfterControlPlaneUpgrade and Before/AfterWorkersUpgrade;
  `core/reconcilers/topology/cluster/cluster_controller.go` for BeforeClusterCreate and
  BeforeClusterDelete; `reconcile_state.go` for AfterClusterUpgrade): a cache hit that should
  requeue skips the call (the cached message is reported, `ToResponse` rounds the remainder to
  at least 1 s) and the reconcile is requeued after the remainder. After a call whose
  aggregated `retryAfterSeconds` is not 0, an entry with `ReconcileAfter = time.Now() +
  retryAfterSeconds` is added and the reconcile requeued after `retryAfterSeconds`. A 0 adds
  nothing: the lifecycle moves on.
- Failures (`internal/runtime/client/client.go`, `CallAllExtensions`): a `Failure` status, or
  a transport error under `failurePolicy: Fail`, is an error: nothing is cached, and the
  Reconcile's error requeues the Cluster through the controller's rate limiter
  (`util/controller/builder.go`: 1 s + 5 ms * 2^failures, at most 1000 s).
- Rate limit (`util/controller/controller.go`, ReconcilerRateLimiting, GA at ae7ff04): a Cluster
  is reconciled at most once a second; a shorter RequeueAfter is raised to that.
- Concurrency (`core/main.go`): `--clustertopology-concurrency`, default 50 reconciles at once.
- Order (`exp/topology/desiredstate/desired_state.go`, `computeControlPlaneVersion`): after
  AfterControlPlaneUpgrade answers 0, BeforeWorkersUpgrade (or the next
  BeforeControlPlaneUpgrade, or AfterClusterUpgrade in `reconcile_state.go`) is called in the
  same reconcile; after AfterWorkersUpgrade, the next BeforeControlPlaneUpgrade (or
  AfterClusterUpgrade); after BeforeClusterUpgrade, the first BeforeControlPlaneUpgrade. After
  BeforeControlPlaneUpgrade and BeforeWorkersUpgrade a rollout happens first, so the next hook
  comes at a later reconcile (`HookStep.chained`).

Not modelled: the rollouts themselves (`infra_seconds`, default 0: the next reconcile comes as
soon as the rate limit allows) and the time CAPI's own reconcile takes around a call.
"""

from __future__ import annotations

import dataclasses
import heapq
import http.client
import json
import math
import queue
import select
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from tests.support import capi

#: util/controller/controller.go: at most one reconcile of a Cluster per second.
RATE_LIMIT_SECONDS = 1.0
#: util/controller/builder.go: the rate limiter's backoff after a failed reconcile.
BACKOFF_BASE_SECONDS = 0.005
BACKOFF_MAX_SECONDS = 1000.0
#: core/main.go: --clustertopology-concurrency.
CONCURRENCY = 50
#: internal/runtime/client/client.go: the default timeout of an extension call.
CALL_TIMEOUT_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class HookStep:
    """One hook call site of a Cluster's lifecycle."""

    hook: str
    fields: dict[str, Any]
    blocking: bool
    #: CAPI calls the next hook in the same reconcile once this one lets go.
    chained: bool
    #: The Cluster's spec.topology.version while the hook is called.
    version: str

    @property
    def label(self) -> str:
        """The hook and its versions, e.g. `BeforeControlPlaneUpgrade v1.30.0->v1.31.0`."""
        if "toKubernetesVersion" in self.fields:
            return (
                f"{self.hook} {self.fields['fromKubernetesVersion']}->"
                f"{self.fields['toKubernetesVersion']}"
            )
        if "kubernetesVersion" in self.fields:
            return f"{self.hook} {self.fields['kubernetesVersion']}"
        return self.hook


def lifecycle(
    from_version: str = "v1.30.0",
    control_plane: Sequence[str] = ("v1.31.0", "v1.32.3", "v1.33.0"),
    workers: Sequence[str] = ("v1.32.3", "v1.33.0"),
) -> list[HookStep]:
    """Create, a chained upgrade through `control_plane` (workers at `workers`), delete."""
    target = control_plane[-1]

    def plans(cp: str, md: str) -> dict[str, Any]:
        return {
            "controlPlaneUpgrades": [
                {"version": v} for v in control_plane[control_plane.index(cp) + 1 :]
            ]
            if cp in control_plane
            else [{"version": v} for v in control_plane],
            "workersUpgrades": [{"version": v} for v in workers[workers.index(md) + 1 :]]
            if md in workers
            else [{"version": v} for v in workers],
        }

    steps = [
        HookStep("BeforeClusterCreate", {}, blocking=True, chained=False, version=from_version),
        HookStep(
            "AfterControlPlaneInitialized", {}, blocking=False, chained=False, version=from_version
        ),
        HookStep(
            "BeforeClusterUpgrade",
            {
                "fromKubernetesVersion": from_version,
                "toKubernetesVersion": target,
                **plans(from_version, from_version),
            },
            blocking=True,
            chained=True,
            version=target,
        ),
    ]
    cp, md = from_version, from_version
    for nxt in control_plane:
        steps.append(
            HookStep(
                "BeforeControlPlaneUpgrade",
                {"fromKubernetesVersion": cp, "toKubernetesVersion": nxt, **plans(cp, md)},
                blocking=True,
                chained=False,
                version=target,
            )
        )
        cp = nxt
        steps.append(
            HookStep(
                "AfterControlPlaneUpgrade",
                {"kubernetesVersion": cp, **plans(cp, md)},
                blocking=True,
                chained=True,
                version=target,
            )
        )
        if cp in workers:
            steps.append(
                HookStep(
                    "BeforeWorkersUpgrade",
                    {"fromKubernetesVersion": md, "toKubernetesVersion": cp, **plans(cp, md)},
                    blocking=True,
                    chained=False,
                    version=target,
                )
            )
            md = cp
            steps.append(
                HookStep(
                    "AfterWorkersUpgrade",
                    {"kubernetesVersion": md, **plans(cp, md)},
                    blocking=True,
                    chained=True,
                    version=target,
                )
            )
    steps += [
        HookStep(
            "AfterClusterUpgrade",
            {"kubernetesVersion": target},
            blocking=True,
            chained=False,
            version=target,
        ),
        HookStep("BeforeClusterDelete", {}, blocking=True, chained=False, version=target),
    ]
    return steps


@dataclasses.dataclass(frozen=True)
class Reply:
    """What one call got: HTTP status (0: no answer), the answer's status and wait."""

    http_status: int
    status: str
    retry_after: int
    message: str = ""
    #: How long hooksvc held the call for its run to change (its Server-Timing `linger`), ms;
    #: CAPI ignores it, the benchmark tells lingering from slowness by it.
    held_ms: float = 0.0

    @property
    def is_error(self) -> bool:
        """CAPI treats it as an error (failurePolicy Fail): a Failure, or no usable answer."""
        return self.http_status != 200 or self.status != "Success"


class Transport(Protocol):
    def post(self, path: str, body: bytes) -> Reply: ...


class HTTPSTransport:
    """Keep-alive HTTPS to one hook server, one connection per calling thread; a context
    manager that closes them all."""

    def __init__(self, host: str, port: int, ca_file: Path, prefix: str = "") -> None:
        self.host, self.port, self.prefix = host, port, prefix
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self._local = threading.local()
        self._opened: list[http.client.HTTPSConnection] = []
        self._lock = threading.Lock()

    def __enter__(self) -> HTTPSTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()

    def post(self, path: str, body: bytes) -> Reply:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is not None and _closed_by_server(conn):
            # Go's transport reads idle connections in the background and drops one the
            # server closed (golang/go src/net/http/transport.go, persistConn.readLoop), so
            # CAPI does not send on it; gunicorn closes keep-alive connections idle for 75 s.
            conn.close()
            conn = None
        if conn is None:
            conn = http.client.HTTPSConnection(
                self.host, self.port, context=self.context, timeout=CALL_TIMEOUT_SECONDS
            )
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        try:
            conn.request(
                "POST", self.prefix + path, body=body, headers={"Content-Type": "application/json"}
            )
            response = conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            self._local.conn = None
            return Reply(0, "", 0)
        if response.status != 200:
            return Reply(response.status, "", 0)
        answer = json.loads(raw)
        return Reply(
            200,
            answer.get("status", ""),
            int(answer.get("retryAfterSeconds", 0)),
            answer.get("message", ""),
            _held_ms(response.getheader("Server-Timing", "")),
        )


def _held_ms(timing: str) -> float:
    """The `linger;dur=<ms>` metric of a Server-Timing header, 0 without it."""
    for metric in timing.split(","):
        name, _, params = metric.strip().partition(";")
        if name == "linger" and params.startswith("dur="):
            return float(params[4:])
    return 0.0


def _closed_by_server(conn: http.client.HTTPSConnection) -> bool:
    """An idle connection that has something to read: the server's close (or its EOF)."""
    if conn.sock is None:
        return True
    readable, _, _ = select.select([conn.sock], [], [], 0)
    return bool(readable)


@dataclasses.dataclass
class HookEntry:
    """util/cache/cache.go HookEntry: when the hook may be called again, and its message."""

    reconcile_after: float
    message: str


class HookCache:
    """CAPI's hook cache: `"<HookName>: <namespace>/<name>"` -> HookEntry."""

    def __init__(self) -> None:
        self._entries: dict[str, HookEntry] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(hook: str, namespace: str, name: str) -> str:
        return f"{hook}: {namespace}/{name}"

    def add(self, key: str, entry: HookEntry) -> None:
        with self._lock:
            self._entries[key] = entry

    def requeue_after(self, key: str, now: float) -> float:
        """HookEntry.ShouldRequeue: seconds until the hook may be called, 0 if it may now."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None or entry.reconcile_after <= now:
            return 0.0
        return entry.reconcile_after - now


@dataclasses.dataclass
class StepRecord:
    """One hook step of one Cluster, as the client saw it."""

    first_call: float | None = None
    #: When the call that let the lifecycle go returned.
    released: float | None = None
    calls: int = 0
    errors: int = 0
    #: The retryAfterSeconds of each Success answer, in order.
    answers: list[int] = dataclasses.field(default_factory=list)

    @property
    def hold(self) -> float | None:
        if self.first_call is None or self.released is None:
            return None
        return self.released - self.first_call


@dataclasses.dataclass
class Cluster:
    """A Cluster going through `steps`, with what the controller keeps about it."""

    name: str
    namespace: str
    uid: str
    steps: list[HookStep]
    position: int = 0
    last_reconcile: float = -math.inf
    failures: int = 0
    records: list[StepRecord] = dataclasses.field(default_factory=list)
    #: Labels beside the `env: prod` every test Cluster has (a rollout's `ring: canary`).
    labels: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.records = [StepRecord() for _ in self.steps]

    @property
    def done(self) -> bool:
        return self.position >= len(self.steps)

    def body(self, step: HookStep) -> bytes:
        cluster = capi.cluster_v1beta2(
            name=self.name,
            namespace=self.namespace,
            uid=self.uid,
            version=step.version,
            labels=self.labels,
        )
        if step.hook == "BeforeClusterCreate":
            # Called before CAPI creates the control plane and infrastructure objects.
            del cluster["spec"]["controlPlaneRef"]
        request = capi.hook_request(step.hook, cluster)
        for field in ("fromKubernetesVersion", "toKubernetesVersion", "kubernetesVersion"):
            request.pop(field, None)
        request.pop("controlPlaneUpgrades", None)
        request.pop("workersUpgrades", None)
        request.update(step.fields)
        return json.dumps(request).encode()


#: A call as the benchmark keeps it: when it was sent, how long it took, and the reply.
CallObserver = Callable[[Cluster, HookStep, float, float, Reply], None]


class Controller:
    """The topology controller's hook handling for a fleet: the hook cache and reconcile()."""

    def __init__(
        self,
        transport: Transport,
        *,
        clock: Callable[[], float] = time.monotonic,
        infra_seconds: float = 0.0,
        observe: CallObserver | None = None,
    ) -> None:
        self.transport = transport
        self.clock = clock
        self.infra_seconds = infra_seconds
        self.cache = HookCache()
        self.observe = observe

    def reconcile(self, cluster: Cluster) -> float | None:
        """Reconcile `cluster` once; when to reconcile it next (the clock's time), None if done."""
        now = self.clock()
        if now < cluster.last_reconcile + RATE_LIMIT_SECONDS:
            return cluster.last_reconcile + RATE_LIMIT_SECONDS
        cluster.last_reconcile = now
        while not cluster.done:
            step = cluster.steps[cluster.position]
            record = cluster.records[cluster.position]
            key = HookCache.key(step.hook, cluster.namespace, cluster.name)
            if step.blocking:
                remaining = self.cache.requeue_after(key, self.clock())
                if remaining > 0:
                    return self._later(cluster, self.clock() + remaining)
            reply = self._call(cluster, step, record)
            if reply.is_error:
                # Reconcile returns the error: the rate limiter's backoff, nothing cached.
                backoff = RATE_LIMIT_SECONDS + BACKOFF_BASE_SECONDS * 2.0 ** min(
                    cluster.failures, 40
                )
                cluster.failures += 1
                return self.clock() + min(backoff, BACKOFF_MAX_SECONDS)
            cluster.failures = 0
            if step.blocking and reply.retry_after != 0:
                returned = self.clock()
                self.cache.add(key, HookEntry(returned + reply.retry_after, reply.message))
                return self._later(cluster, returned + reply.retry_after)
            record.released = self.clock()
            cluster.position += 1
            if not step.chained:
                # A rollout (or a person) acts first; its change brings the next reconcile.
                return None if cluster.done else self._later(cluster, now + self.infra_seconds)
        return None

    @staticmethod
    def _later(cluster: Cluster, at: float) -> float:
        return max(at, cluster.last_reconcile + RATE_LIMIT_SECONDS)

    def _call(self, cluster: Cluster, step: HookStep, record: StepRecord) -> Reply:
        body = cluster.body(step)
        sent = self.clock()
        reply = self.transport.post(capi.hook_path(step.hook), body)
        took = self.clock() - sent
        if record.first_call is None:
            record.first_call = sent
        record.calls += 1
        if reply.is_error:
            record.errors += 1
        else:
            record.answers.append(reply.retry_after)
        if self.observe is not None:
            self.observe(cluster, step, sent, took, reply)
        return reply


def drive(
    controller: Controller,
    clusters: Sequence[Cluster],
    *,
    starts: Sequence[float] | None = None,
    concurrency: int = CONCURRENCY,
    timeout: float = 600.0,
    stop: threading.Event | None = None,
) -> bool:
    """Reconcile every Cluster until its lifecycle is done, `concurrency` at once.

    `starts` are the clock times of each Cluster's first reconcile (default: now). A
    workqueue as controller-runtime's: each Cluster is in it at most once and is reconciled
    by one worker at a time; a scheduler hands due Clusters to the workers. True if every
    lifecycle finished within `timeout` (and before `stop` was set).
    """
    now = controller.clock()
    due: list[tuple[float, int]] = [
        (starts[i] if starts is not None else now, i) for i in range(len(clusters))
    ]
    heapq.heapify(due)
    condition = threading.Condition()
    ready: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    left = [len(clusters)]
    deadline = now + timeout
    errors: list[BaseException] = []

    def schedule() -> None:
        with condition:
            while left[0] and not errors and controller.clock() < deadline:
                if stop is not None and stop.is_set():
                    break
                clock = controller.clock()
                while due and due[0][0] <= clock:
                    ready.put(heapq.heappop(due)[1])
                condition.wait(min(due[0][0] - clock, 1.0) if due else 1.0)
        for _ in range(concurrency):
            ready.put(None)

    def work() -> None:
        while (index := ready.get()) is not None:
            try:
                at = controller.reconcile(clusters[index])
            except BaseException as exc:  # a bug in the caller's transport: stop, raise below
                errors.append(exc)
                at = None
            with condition:
                if at is None:
                    left[0] -= 1
                else:
                    heapq.heappush(due, (at, index))
                condition.notify()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(concurrency)]
    threads.append(threading.Thread(target=schedule, daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return all(c.done for c in clusters)
