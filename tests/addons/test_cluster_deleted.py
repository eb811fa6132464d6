"""The moment after a Cluster is gone (`hook: ClusterDeleted`), started by the Cluster watcher.

Covers: a Cluster's DELETED event starts the matching ClusterDeleted templates' runs, once,
holding nothing, and the run shows in the admin like any other; a Cluster deleted while no
watcher ran, or while the watch was away long enough to be compacted (410 Gone, the
DELETED event never seen), is found missing from the next list by its record and gets its
run, once; restarting the watcher again, or seeing the Cluster gone twice, starts nothing
more; a Cluster's record is written when what is recorded of it changes, not for every
status change.

Upstream facts relied on: a Cluster object disappears (the watch's DELETED event) once
CAPI's Cluster controller removed its finalizer after deleting what the Cluster owned
(kubernetes-sigs/cluster-api internal/controllers/cluster/cluster_controller.go,
reconcileDelete), so no hook can come afterwards; a watch from a compacted resourceVersion
answers 410 Gone and the client lists again (kubernetes staging/src/k8s.io/client-go/tools/
cache/reflector.go). The emulator models both (finalizers hold a deletion until removed;
`kube.compact()`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from hooksvc.contract import wire
from tests.addons.test_watcher import CLUSTERS, cluster, wait_for
from tests.support.kube import KubeEmulator
from tests.workflows import documents
from workflows.controllers import listwatch, watcher
from workflows.definitions import apply, spec
from workflows.kube import k8s
from workflows.models import KnownCluster, Run

pytestmark = pytest.mark.django_db(transaction=True)


def deleted_template(name: str, **body: Any) -> None:
    fields: dict[str, Any] = {
        "hook": "ClusterDeleted",
        "clusterSelector": {"matchLabels": {"env": "prod"}},
        "steps": [{"name": "deregister", "type": "noop"}],
        **body,
    }
    doc = documents.template(name, **fields)
    [parsed] = spec.parse(documents.dump(doc))
    apply.template_upsert(name=name, spec_=parsed.spec)


def deleted_runs() -> list[tuple[str, str, str]]:
    return sorted(
        Run.objects.filter(hook="ClusterDeleted").values_list(
            "cluster_key", "template_name", "moment"
        )
    )


class Process:
    """One watcher process: started, and stopped (a restart is a new one)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.loop = watcher.Watcher(stop=self.stop, timeout_seconds=1)
        self.thread = threading.Thread(target=self.loop.run, name="watcher", daemon=True)
        self.thread.start()
        wait_for("the first list", lambda: bool(self.loop.resource_version))

    def close(self, kube: KubeEmulator) -> None:
        self.stop.set()
        if not kube.running:
            kube.start()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()


@pytest.fixture
def fleet(
    kube: KubeEmulator, kubeconfig_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KubeEmulator]:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(listwatch, "BACKOFF_CAP_SECONDS", 0.5)
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleet"}})
    deleted_template("deregister")
    deleted_template("dev-only", clusterSelector={"matchLabels": {"env": "dev"}})
    k8s.forget_clients()
    with override_settings(KUBECONFIG_PATH=kubeconfig_path):
        yield kube
    k8s.forget_clients()


def delete(kube: KubeEmulator, name: str) -> None:
    """As CAPI deletes a Cluster: marked first, gone once its finalizer is removed."""
    obj = kube.get_object(*CLUSTERS, "fleet", name)
    assert obj is not None
    kube.put_object(
        {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    )
    kube.delete_object(*CLUSTERS, "fleet", name)


def test_a_deleted_cluster_starts_its_cluster_deleted_run_once(
    fleet: KubeEmulator, admin_client: Client
) -> None:
    process = Process()
    try:
        fleet.put_object(cluster("gone", topology=True, deleting=False, uid="u-gone"))
        wait_for("the Cluster recorded", lambda: KnownCluster.objects.filter(key="u-gone").exists())
        assert deleted_runs() == []
        delete(fleet, "gone")
        wait_for("the ClusterDeleted run", lambda: bool(deleted_runs()))
        assert deleted_runs() == [("u-gone", "deregister", "")]
        run = Run.objects.get(hook="ClusterDeleted")
        assert run.spec["holdsLifecycle"] is False
        assert run.context["cluster"]["name"] == "gone"
        assert not KnownCluster.objects.filter(key="u-gone").exists()
        # Seen gone again (a repeated event, a later list): nothing more.
        again = wire.parse_cluster(cluster("gone", topology=True, deleting=True, uid="u-gone"))
        assert watcher.deleted_ensure(again) == [run.pk]
        assert deleted_runs() == [("u-gone", "deregister", "")]
    finally:
        process.close(fleet)
    page = admin_client.get(reverse("admin:workflows_run_change", args=[run.pk]))
    assert page.status_code == 200
    assert "ClusterDeleted" in page.content.decode()


def test_a_cluster_deleted_while_no_watcher_ran_gets_its_run_once_across_restarts(
    fleet: KubeEmulator,
) -> None:
    process = Process()
    fleet.put_object(cluster("gone", topology=False, deleting=False, uid="u-gone"))
    fleet.put_object(cluster("stays", topology=False, deleting=False, uid="u-stays"))
    wait_for("both Clusters recorded", lambda: KnownCluster.objects.count() == 2)
    process.close(fleet)
    delete(fleet, "gone")  # no watcher sees the DELETED event
    for _ in range(2):  # the restart that notices, and one more
        process = Process()
        process.close(fleet)
    assert deleted_runs() == [("u-gone", "deregister", "")]
    assert list(KnownCluster.objects.values_list("key", flat=True)) == ["u-stays"]


def test_a_list_after_a_compacted_watch_finds_the_cluster_gone(fleet: KubeEmulator) -> None:
    process = Process()
    try:
        fleet.put_object(cluster("gone", topology=False, deleting=False, uid="u-gone"))
        wait_for("the Cluster recorded", KnownCluster.objects.exists)
        fleet.stop()
        delete(fleet, "gone")
        fleet.compact()  # the DELETED event is out of the watch's reach: 410, list again
        fleet.start()
        wait_for("the ClusterDeleted run", lambda: bool(deleted_runs()))
        time.sleep(1.5)  # more watches and lists
        assert deleted_runs() == [("u-gone", "deregister", "")]
    finally:
        process.close(fleet)


def test_a_cluster_is_recorded_again_only_when_what_is_kept_of_it_changes(
    fleet: KubeEmulator,
) -> None:
    process = Process()
    try:
        fleet.put_object(cluster("kept", topology=True, deleting=False, uid="u-kept"))
        wait_for("the Cluster recorded", KnownCluster.objects.exists)
        first = KnownCluster.objects.get().seen_at
        fleet.set_status(*CLUSTERS, "fleet", "kept", {"phase": "Provisioned"})
        time.sleep(1.5)
        assert KnownCluster.objects.get().seen_at == first
        obj = fleet.get_object(*CLUSTERS, "fleet", "kept")
        assert obj is not None
        labels = {**obj["metadata"]["labels"], "tier": "gold"}
        fleet.put_object({**obj, "metadata": {**obj["metadata"], "labels": labels}})
        wait_for(
            "the new label recorded",
            lambda: KnownCluster.objects.get().cluster["metadata"]["labels"].get("tier") == "gold",
        )
    finally:
        process.close(fleet)
