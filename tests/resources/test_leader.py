"""One leader among the watcher's replicas: a coordination.k8s.io/v1 Lease, as client-go elects.

Covers: of two replicas one runs the loops and the other stands by; the Lease names the
holder, keeps acquireTime and leaseTransitions while renewTime moves; a leader that stops
releases the Lease and the standby takes over; a holder that vanished without releasing is
replaced once its lease runs out, and not while it renews; a leader that cannot renew, or
whose Lease another took, stops its loops; a write from an out-of-date read loses (409).

Upstream: kubernetes/client-go v0.36 `tools/leaderelection/leaderelection.go`
(`tryAcquireOrRenew`, `renew`, `release`, `isLeaseValid`) and
`tools/leaderelection/resourcelock/leaselock.go` (`Get`, `Create`, `Update`); the emulator
serves Leases as kube-apiserver does: 409 on a stale resourceVersion, MicroTime fields
decoded strictly, `ValidateLeaseSpec` (kubernetes pkg/apis/coordination/validation).
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from tests.resources.conftest import wait_for
from tests.support.kube import KubeEmulator
from workflows.controllers import leader, lease
from workflows.kube import k8s

NS = "hooksvc-system"
LEASES = ("coordination.k8s.io", "v1", "leases")
#: Short enough for tests, in the proportions client-go requires (NewLeaderElector).
TIMING = lease.Timing(lease_duration=2.0, renew_deadline=1.5, retry_period=0.25)


@pytest.fixture(autouse=True)
def management(
    kube: KubeEmulator, kubeconfig_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KubeEmulator]:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    k8s.forget_clients()
    with override_settings(KUBECONFIG_PATH=kubeconfig_path):
        yield kube
    k8s.forget_clients()


class Stub:
    """A loop that runs until its term ends."""

    def __init__(self, stop: threading.Event, running: set[str], name: str) -> None:
        self.stop, self.running, self.name = stop, running, name

    def run(self) -> None:
        self.running.add(self.name)
        self.stop.wait()
        self.running.discard(self.name)

    def problem(self) -> str:
        return ""


class Replica:
    def __init__(self, name: str, running: set[str]) -> None:
        self.stop = threading.Event()
        self.manager = leader.Manager(
            stop=self.stop,
            loops=lambda term: [Stub(term, running, name)],
            timing=TIMING,
            namespace=NS,
            holder=name,
        )
        self.thread = threading.Thread(target=self.manager.run, name=name, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()


@pytest.fixture
def running() -> set[str]:
    return set()


@pytest.fixture
def replicas(running: set[str]) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.close()


def the_lease(kube: KubeEmulator) -> dict[str, Any]:
    found = kube.get_object(*LEASES, NS, leader.LEASE_NAME)
    assert found is not None, "no Lease"
    spec: dict[str, Any] = found["spec"]
    return spec


def micro_now(seconds: float = 0) -> str:
    now = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return lease.micro_time(now)


def test_one_replica_leads_the_lease_names_it_and_renewals_move_only_renew_time(
    kube: KubeEmulator, replicas: list[Replica], running: set[str]
) -> None:
    replicas.append(Replica("first", running))
    wait_for("the first to lead", lambda: running == {"first"})
    replicas.append(Replica("second", running))
    first = the_lease(kube)
    assert (first["holderIdentity"], first["leaseDurationSeconds"]) == ("first", 2)
    assert first["leaseTransitions"] == 0
    wait_for("a renewal", lambda: the_lease(kube)["renewTime"] != first["renewTime"])
    renewed = the_lease(kube)
    assert (renewed["acquireTime"], renewed["leaseTransitions"]) == (first["acquireTime"], 0)
    assert running == {"first"}, "the second stands by"
    assert all(r.manager.healthy() for r in replicas)


def test_a_leader_that_stops_releases_the_lease_and_the_standby_takes_over(
    kube: KubeEmulator, replicas: list[Replica], running: set[str]
) -> None:
    first = Replica("first", running)
    wait_for("the first to lead", lambda: running == {"first"})
    replicas.append(Replica("second", running))
    first.close()
    released = the_lease(kube)
    # client-go `release`: no holder, a duration of one second.
    assert (released["holderIdentity"], released["leaseDurationSeconds"]) == ("", 1)
    wait_for("the standby to lead", lambda: running == {"second"})
    taken = the_lease(kube)
    assert (taken["holderIdentity"], taken["leaseTransitions"]) == ("second", 1)
    assert replicas[0].manager.terms == 1


def test_a_holder_that_vanished_is_replaced_once_its_lease_runs_out_not_while_it_renews(
    kube: KubeEmulator, replicas: list[Replica], running: set[str]
) -> None:
    spec = {
        "holderIdentity": "vanished",
        "leaseDurationSeconds": 2,
        "acquireTime": micro_now(-60),
        "renewTime": micro_now(),
        "leaseTransitions": 4,
    }
    kube.put_object(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": leader.LEASE_NAME, "namespace": NS},
            "spec": spec,
        }
    )
    replicas.append(Replica("standby", running))
    # While the holder renews (its record changes), the standby's clock restarts each time.
    for _ in range(8):
        threading.Event().wait(0.5)
        kube.put_object(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": leader.LEASE_NAME, "namespace": NS},
                "spec": {**spec, "renewTime": micro_now()},
            }
        )
        assert running == set(), "took a lease its holder renews"
    wait_for("the standby to take the lapsed lease", lambda: running == {"standby"})
    taken = the_lease(kube)
    assert (taken["holderIdentity"], taken["leaseTransitions"]) == ("standby", 5)


def test_a_leader_that_cannot_renew_stops_its_loops_and_campaigns_again(
    kube: KubeEmulator, replicas: list[Replica], running: set[str]
) -> None:
    replicas.append(Replica("only", running))
    wait_for("it leads", lambda: running == {"only"})
    kube.fail_next("*", "/leases/", 500, times=1000)
    wait_for("its loops stopped", lambda: running == set())
    assert not replicas[0].manager.leading
    kube.reset()
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    wait_for("it leads again", lambda: running == {"only"})
    assert replicas[0].manager.terms == 2


def test_a_leader_whose_lease_another_took_stops_its_loops(
    kube: KubeEmulator, replicas: list[Replica], running: set[str]
) -> None:
    replicas.append(Replica("paused", running))
    wait_for("it leads", lambda: running == {"paused"})
    # Another replica took over (as after a pause longer than the lease), and renews.
    stop = threading.Event()

    def usurp() -> None:
        while not stop.is_set():
            current = kube.get_object(*LEASES, NS, leader.LEASE_NAME) or {}
            current["spec"] = {**current.get("spec", {}), "holderIdentity": "usurper"}
            current["spec"]["renewTime"] = micro_now()
            kube.put_object(current)
            stop.wait(0.2)

    thread = threading.Thread(target=usurp, daemon=True)
    thread.start()
    try:
        wait_for("its loops stopped", lambda: running == set())
        assert the_lease(kube)["holderIdentity"] == "usurper"
        assert replicas[0].manager.healthy(), "a standby is healthy"
    finally:
        stop.set()
        thread.join(timeout=10)


def test_a_write_from_an_out_of_date_read_loses() -> None:
    """Two candidates read an expired Lease; the one that writes second gets 409 and loses."""
    clock = [0.0]
    early, late = (
        lease.Lease(
            namespace=NS,
            name="race",
            identity=name,
            timing=TIMING,
            monotonic=lambda: clock[0],
        )
        for name in ("early", "late")
    )
    assert early.try_acquire_or_renew(), "created"
    assert not late.try_acquire_or_renew(), "held by early"
    clock[0] += 10  # early's lease ran out by late's clock, and by early's own
    # late's copy of the Lease is early's first write; early renews over it first.
    assert early.try_acquire_or_renew()
    record = {"holderIdentity": "late", "leaseDurationSeconds": 2, "leaseTransitions": 1}
    assert not late._write(record, None), "a stale resourceVersion must lose"
    assert late.try_acquire_or_renew() is False, "early renewed: its lease is valid again"


def test_a_leader_whose_lease_was_not_renewed_for_long_is_unhealthy() -> None:
    """client-go HealthzAdaptor: unhealthy past leaseDuration + maxTolerableExpiredLease."""
    manager = leader.Manager(stop=threading.Event(), loops=list, namespace=NS, holder="x")
    assert manager.problem() == "", "a standby is healthy"
    manager.leading = True
    manager.lease.observed_at -= manager.timing.lease_duration + 60
    assert manager.problem().startswith("the lead was not renewed for ")


@pytest.mark.parametrize(
    ("timing", "message"),
    [
        ({"lease_duration": 10, "renew_deadline": 10}, "lease_duration must be greater"),
        ({"renew_deadline": 2, "retry_period": 2}, "renew_deadline must be greater"),
    ],
)
def test_timings_client_go_refuses_are_refused(timing: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        lease.Timing(**timing)
