"""A gate with `all: true` judged against the live fleet: the Cluster watcher runs against
the emulator (the management cluster), a real Celery worker polls the gate, and the fleet's
hook calls go through the CAPI client over HTTPS.

Covers: a canary deleted mid-upgrade no longer holds the wave; a canary deleted and
recreated (a new uid, as `kubectl delete` then `apply` gives) counts as the new Cluster,
which must pass itself, the old uid's unfinished upgrade counting for nothing; a canary
relabelled out of the ring mid-wave no longer holds it, one relabelled into it is waited
for; the gate says so while there is no canary at all. Each fails with canaries known by
their runs (as before the watcher's record was read): the wave held for good.

Upstream: a Cluster object disappears (the watch's DELETED event) once CAPI removed its
finalizer (kubernetes-sigs/cluster-api internal/controllers/cluster/cluster_controller.go
reconcileDelete); the API server gives a recreated object a new metadata.uid
(kubernetes staging/src/k8s.io/apiserver/pkg/registry/rest/create.go FillObjectMetaSystemFields);
CAPI calls lifecycle hooks only for Clusters with a managed topology
(exp/topology/desiredstate/lifecycle_hooks.go), and AfterClusterUpgrade once a Cluster's
upgrade is done (core/reconcilers/topology/cluster/reconcile_state.go callAfterClusterUpgrade).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from tests.addons.test_cluster_deleted import Process, delete
from tests.addons.test_watcher import wait_for
from tests.support import capi, capi_client, servers
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator
from tests.support.worker import Worker
from tests.workflows import rollouts
from workflows.controllers import listwatch
from workflows.kube import k8s
from workflows.models import KnownCluster, Run, StepRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Polled every second, the least it may: each test waits for the gate's next look.
ALL = {"matchLabels": {"ring": "canary"}, "all": True, "pollSeconds": 1}
UPGRADE = ("BeforeClusterUpgrade", "AfterClusterUpgrade")


def _obj(name: str, uid: str, **labels: str) -> dict[str, Any]:
    obj = capi.cluster_v1beta2(name=name, uid=uid, labels=labels)
    obj["metadata"].pop("resourceVersion", None)
    return obj


def _cluster(name: str, uid: str, *hooks: str, **labels: str) -> capi_client.Cluster:
    steps = [s for s in capi_client.lifecycle() if s.hook in hooks]
    return capi_client.Cluster(name, "fleet", uid, steps, labels=labels)


class Fleet:
    """The management cluster's Clusters, the watcher that records them, and CAPI's calls."""

    def __init__(self, kube: KubeEmulator, transport: capi_client.HTTPSTransport) -> None:
        self.kube = kube
        self.transport = transport
        self.controller = capi_client.Controller(transport, clock=time.time)

    def put(self, name: str, uid: str, **labels: str) -> None:
        """Create or change a Cluster, and wait until the watcher recorded it so."""
        self.kube.put_object(_obj(name, uid, **labels))
        wait_for(
            f"the watcher records {name}",
            lambda: KnownCluster.objects.filter(
                key=uid, cluster__metadata__labels__contains={"env": "prod", **labels}
            ).exists(),
        )

    def delete(self, name: str, uid: str) -> None:
        delete(self.kube, name)
        wait_for(f"the watcher forgets {name}", lambda: not KnownCluster.objects.filter(key=uid))

    def starts(self, cluster: capi_client.Cluster) -> None:
        """The canary's upgrade begins (BeforeClusterUpgrade): hooksvc has a run of it."""
        before = capi.hook_path("BeforeClusterUpgrade")
        self.transport.post(before, cluster.body(cluster.steps[0]))
        wait_for(
            f"{cluster.name}'s BeforeClusterUpgrade run",
            lambda: Run.objects.filter(cluster_key=cluster.uid, state="succeeded").exists(),
        )

    def passes(self, cluster: capi_client.Cluster) -> None:
        """The canary upgrades: its BeforeClusterUpgrade and AfterClusterUpgrade answered."""
        assert capi_client.drive(self.controller, [cluster], timeout=60), cluster.records

    def held(self, cluster: capi_client.Cluster) -> str:
        """The main cluster asks to upgrade; its gate polled once since: what it answers."""
        before = capi.hook_path("BeforeClusterUpgrade")
        self.transport.post(before, cluster.body(cluster.steps[0]))
        gate = StepRun.objects.filter(type="gate", run__cluster_name=cluster.name)
        wait_for("the gate's first poll", lambda: gate.filter(state="waiting").exists())
        reply = self.transport.post(before, cluster.body(cluster.steps[0]))
        assert reply.status == "Success" and reply.retry_after > 0, reply
        return reply.message

    def proceeds(self, cluster: capi_client.Cluster) -> None:
        assert capi_client.drive(self.controller, [cluster], timeout=60), cluster.records[0]
        assert Run.objects.get(template_name="wave-main", cluster_name=cluster.name).state == (
            "succeeded"
        )


@pytest.fixture
def fleet(
    kube: KubeEmulator,
    kubeconfig_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    hook_server: servers.HookServer,
    worker: Worker,
) -> Iterator[Fleet]:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(listwatch, "BACKOFF_CAP_SECONDS", 0.5)
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleet"}})
    rollouts.templates(gate=ALL)
    # The canaries' own BeforeClusterUpgrade workflow: a canary that began upgrading has
    # a run with its labels, as a canary of a real fleet has (hooksvc knew canaries so).
    wf.template(
        "canary-prepare",
        steps=[{"name": "prepare", "type": "noop"}],
        clusterSelector={"matchLabels": {"ring": "canary"}},
    )
    k8s.forget_clients()
    with (
        override_settings(KUBECONFIG_PATH=kubeconfig_path),
        capi_client.HTTPSTransport(
            hook_server.host, hook_server.port, hook_server.ca_file
        ) as transport,
    ):
        process = Process()
        try:
            found = Fleet(kube, transport)
            found.put("main-1", "uid-main-1", ring="main")
            found.put("canary-1", "uid-canary-1", ring="canary")
            found.put("canary-2", "uid-canary-2", ring="canary")
            yield found
        finally:
            process.close(kube)
            rollouts.drained()
    k8s.forget_clients()


def _main() -> capi_client.Cluster:
    return _cluster("main-1", "uid-main-1", "BeforeClusterUpgrade", ring="main")


WAITS = (
    "workflow wave-main waits for all canaries ring=canary to pass AfterClusterUpgrade at "
    "v1.33.0 at step canaries"
)


def test_a_canary_deleted_mid_upgrade_no_longer_holds_the_wave(fleet: Fleet) -> None:
    fleet.passes(_cluster("canary-1", "uid-canary-1", *UPGRADE, ring="canary"))
    fleet.starts(_cluster("canary-2", "uid-canary-2", *UPGRADE, ring="canary"))
    main = _main()
    assert fleet.held(main) == WAITS, "canary-2 has not finished its upgrade"
    fleet.delete("canary-2", "uid-canary-2")
    fleet.proceeds(main)


def test_a_recreated_canary_counts_as_the_new_cluster(fleet: Fleet) -> None:
    """canary-2 began upgrading, then was deleted and recreated: the old uid never
    finishes, and the new one is waited for until it passed itself."""
    fleet.passes(_cluster("canary-1", "uid-canary-1", *UPGRADE, ring="canary"))
    fleet.starts(_cluster("canary-2", "uid-canary-2", *UPGRADE, ring="canary"))
    fleet.delete("canary-2", "uid-canary-2")
    fleet.put("canary-2", "uid-canary-2-new", ring="canary")
    main = _main()
    assert fleet.held(main) == WAITS, "the new canary-2 has not upgraded"
    fleet.passes(_cluster("canary-2", "uid-canary-2-new", *UPGRADE, ring="canary"))
    fleet.proceeds(main)


def test_a_canary_relabelled_out_of_the_ring_mid_wave_no_longer_holds_it(fleet: Fleet) -> None:
    fleet.passes(_cluster("canary-1", "uid-canary-1", *UPGRADE, ring="canary"))
    fleet.starts(_cluster("canary-2", "uid-canary-2", *UPGRADE, ring="canary"))
    main = _main()
    assert fleet.held(main) == WAITS
    fleet.put("canary-2", "uid-canary-2", ring="main")
    fleet.proceeds(main)


def test_a_canary_relabelled_into_the_ring_is_waited_for(fleet: Fleet) -> None:
    fleet.passes(_cluster("canary-1", "uid-canary-1", *UPGRADE, ring="canary"))
    fleet.passes(_cluster("canary-2", "uid-canary-2", *UPGRADE, ring="canary"))
    fleet.put("main-2", "uid-main-2", ring="canary")
    main = _main()
    assert fleet.held(main) == WAITS, "main-2 is a canary now, and has not upgraded"
    fleet.passes(_cluster("main-2", "uid-main-2", *UPGRADE, ring="canary"))
    fleet.proceeds(main)


def test_a_wave_without_any_canary_waits_and_says_so(fleet: Fleet) -> None:
    fleet.delete("canary-1", "uid-canary-1")
    fleet.delete("canary-2", "uid-canary-2")
    assert fleet.held(_main()) == (
        "workflow wave-main waits for all canaries ring=canary to pass AfterClusterUpgrade at "
        "v1.33.0 (no Cluster has those labels now) at step canaries"
    )
