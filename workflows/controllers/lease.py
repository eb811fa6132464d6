"""The watcher's leader lock: a coordination.k8s.io/v1 Lease, with client-go's semantics.

Read in kubernetes/client-go (v0.36) `tools/leaderelection/leaderelection.go`
(`tryAcquireOrRenew`, `release`, `isLeaseValid`) and `resourcelock/leaselock.go`: a
candidate reads the Lease; it takes it when nobody holds it, or when the record it holds
has not changed for the holder's `leaseDurationSeconds` *as this candidate observed it* (its
own monotonic clock, so clocks that disagree do not matter, only clocks that run at
different rates); it writes with the resourceVersion it read, so of two candidates one
gets 409 and loses. The holder renews `renewTime` (keeping `acquireTime` and
`leaseTransitions`), first optimistically on the object it last wrote; a new holder adds
one to `leaseTransitions`. Releasing empties `holderIdentity` with a duration of 1 s, so a
standby takes over at its next try rather than after the lease's duration.

client-go's own warning holds here too: this does not guarantee that only one replica
acts at a time (no fencing); `workflows.controllers.leader` stops the loops before the
lease can pass to another, and everything they write is idempotent.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import time
from collections.abc import Callable
from typing import Any

from workflows.kube import k8s

GROUP_VERSION = "coordination.k8s.io/v1"
#: client-go's core defaults (leaderelection.go LeaderElectionConfig comments).
LEASE_DURATION_SECONDS = 15.0
RENEW_DEADLINE_SECONDS = 10.0
RETRY_PERIOD_SECONDS = 2.0
#: leaderelection.go JitterFactor: a candidate's tries are 1-1.2 retry periods apart.
JITTER_FACTOR = 1.2


@dataclasses.dataclass(frozen=True)
class Timing:
    """How long a lease lasts, how long a leader tries to renew it, and how often it tries."""

    lease_duration: float = LEASE_DURATION_SECONDS
    renew_deadline: float = RENEW_DEADLINE_SECONDS
    retry_period: float = RETRY_PERIOD_SECONDS

    def __post_init__(self) -> None:
        # leaderelection.go NewLeaderElector's checks: a leader must give up before its
        # lease can pass to another, and try several times before it gives up.
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError("renew_deadline must be greater than retry_period * 1.2")
        if self.retry_period <= 0:
            raise ValueError("retry_period must be greater than zero")


def micro_time(moment: datetime.datetime) -> str:
    """metav1.MicroTime's JSON form (RFC 3339, six fractional digits, UTC)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Lease:
    """One Lease as a lock held by `identity`; not thread-safe (one campaigning thread)."""

    def __init__(
        self,
        *,
        namespace: str,
        name: str,
        identity: str,
        timing: Timing,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.namespace, self.name, self.identity, self.timing = namespace, name, identity, timing
        self.monotonic = monotonic
        #: The Lease's spec as last read or written, when, and the object (for its version).
        self.observed: dict[str, Any] = {}
        self.observed_at = 0.0
        self._object: dict[str, Any] | None = None

    @property
    def path(self) -> str:
        return f"/apis/{GROUP_VERSION}/namespaces/{self.namespace}/leases/{self.name}"

    @property
    def is_leader(self) -> bool:
        """Whether the record last observed names this candidate."""
        return bool(self.observed) and self.observed.get("holderIdentity") == self.identity

    def valid(self) -> bool:
        """The observed record has not outlived its duration, by this candidate's clock."""
        duration = float(self.observed.get("leaseDurationSeconds") or 0)
        return self.observed_at + duration > self.monotonic()

    def try_acquire_or_renew(self, timeout: float | None = None) -> bool:
        """Take or renew the lease; False when another holds it or the API server refused."""
        now = micro_time(datetime.datetime.now(datetime.UTC))
        record: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, int(self.timing.lease_duration)),
            "acquireTime": now,
            "renewTime": now,
        }
        # 1. The leader's fast path: write over what it wrote last, if nobody changed it.
        if self.is_leader and self.valid() and self._object is not None:
            record["acquireTime"] = self.observed.get("acquireTime", now)
            record["leaseTransitions"] = int(self.observed.get("leaseTransitions") or 0)
            if self._write(record, timeout):
                return True
        # 2. Read it, or create it.
        try:
            found = self._call("GET", timeout=timeout)
        except k8s.NotFound:
            return self._create({**record, "leaseTransitions": 0}, timeout)
        except k8s.K8sError:
            return False
        self._object = found
        spec = dict(found.get("spec") or {})
        if spec != self.observed:
            self.observed, self.observed_at = spec, self.monotonic()
        # 3. Held by another, and not yet expired by our clock: wait.
        if spec.get("holderIdentity") and self.valid() and not self.is_leader:
            return False
        # 4. Ours to renew, or to take over.
        transitions = int(spec.get("leaseTransitions") or 0)
        if self.is_leader:
            record["acquireTime"] = spec.get("acquireTime", now)
            record["leaseTransitions"] = transitions
        else:
            record["leaseTransitions"] = transitions + 1
        return self._write(record, timeout)

    def release(self, timeout: float | None = None) -> bool:
        """Give the lease up if this candidate holds it (client-go `release`)."""
        if not self.is_leader or self._object is None:
            return True
        now = micro_time(datetime.datetime.now(datetime.UTC))
        record = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": int(self.observed.get("leaseTransitions") or 0),
        }
        return self._write(record, timeout)

    # --- the API calls ---------------------------------------------------------------

    def _create(self, record: dict[str, Any], timeout: float | None) -> bool:
        body = {
            "apiVersion": GROUP_VERSION,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record,
        }
        collection = self.path.rsplit("/", 1)[0]
        try:
            self._object = self._call("POST", path=collection, body=body, timeout=timeout)
        except k8s.K8sError:
            return False  # another candidate created it first (409), or no answer
        self.observed, self.observed_at = dict(record), self.monotonic()
        return True

    def _write(self, record: dict[str, Any], timeout: float | None) -> bool:
        """Replace the spec, conditional on the resourceVersion last read (409 loses)."""
        body = copy.deepcopy(self._object or {})
        body["spec"] = record
        try:
            self._object = self._call("PUT", body=body, timeout=timeout)
        except k8s.K8sError:
            return False
        self.observed, self.observed_at = dict(record), self.monotonic()
        return True

    def _call(
        self,
        method: str,
        *,
        path: str | None = None,
        body: Any = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        bound = (min(timeout, k8s.REQUEST_TIMEOUT[0]), timeout) if timeout else None
        found: dict[str, Any] = k8s.request(
            k8s.management_api(),
            method,
            path or self.path,
            what=f"Lease {self.namespace}/{self.name}",
            body=body,
            content_type="application/json" if body is not None else None,
            timeout=bound,
        )
        return found
