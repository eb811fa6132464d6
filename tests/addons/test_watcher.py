"""`watch_clusters` against the emulator: removal for deleted Clusters CAPI calls no hook for.

Covers: a Cluster without a topology that gets a deletionTimestamp gets its removal runs
(and only the generated templates that match it); a Cluster with a topology is left to
the hook; the watcher survives the API server going away and resumes from its
resourceVersion without listing again; a compacted resourceVersion (410 Gone) makes it
list again; handling a Cluster twice creates nothing twice.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from tests.addons.profiles import apply, profile
from tests.support import capi
from tests.support.kube import KubeEmulator
from tests.support.servers import free_port
from workflows.controllers import listwatch, watcher
from workflows.kube import k8s
from workflows.models import Run

pytestmark = pytest.mark.django_db(transaction=True)
CLUSTERS = ("cluster.x-k8s.io", "v1beta2", "clusters")
DELETED = "2026-01-01T00:00:00Z"


def cluster(name: str, *, topology: bool, deleting: bool, uid: str) -> dict[str, Any]:
    obj = capi.cluster_v1beta2(name=name, namespace="fleet", uid=uid, labels={"env": "prod"})
    obj["metadata"].pop("resourceVersion", None)
    obj["metadata"]["finalizers"] = ["cluster.cluster.x-k8s.io"]
    if not topology:
        obj["spec"].pop("topology", None)
    if deleting:
        obj["metadata"]["deletionTimestamp"] = DELETED
    return obj


def wait_for(what: str, predicate: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(0.1)


def lists(kube: KubeEmulator) -> int:
    return sum(
        1
        for method, path in kube.requests
        if method == "GET" and "/clusters" in path and "watch=" not in path
    )


@pytest.fixture
def running(
    kube: KubeEmulator, kubeconfig_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[watcher.Watcher]:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(listwatch, "BACKOFF_CAP_SECONDS", 0.5)
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleet"}})
    k8s.forget_clients()
    stop = threading.Event()
    loop = watcher.Watcher(stop=stop, timeout_seconds=1)
    with override_settings(KUBECONFIG_PATH=kubeconfig_path):
        thread = threading.Thread(target=loop.run, name="watcher", daemon=True)
        thread.start()
        wait_for("the first list", lambda: bool(loop.resource_version))
        yield loop
        stop.set()
        if not kube.running:
            kube.start()
        thread.join(timeout=60)
        assert not thread.is_alive()
    k8s.forget_clients()


def removals() -> list[tuple[str, str]]:
    return sorted(
        Run.objects.filter(hook="BeforeClusterDelete").values_list("cluster_name", "template_name")
    )


def test_a_deleted_cluster_without_a_topology_gets_its_removal_runs(
    tmp_path: Path, kube: KubeEmulator, running: watcher.Watcher
) -> None:
    apply(
        tmp_path,
        profile(
            "prod",
            behaviour="EnforceRemovePolicies",
            clusterSelector={"matchLabels": {"env": "prod"}},
        ),
        profile("dev", clusterSelector={"matchLabels": {"env": "dev"}}),
        profile("kept", behaviour="LeavePolicies"),
    )
    kube.put_object(cluster("plain", topology=False, deleting=False, uid="u-plain"))
    kube.put_object(cluster("classy", topology=True, deleting=True, uid="u-classy"))
    kube.put_object(cluster("plain", topology=False, deleting=True, uid="u-plain"))
    wait_for("the removal run", lambda: bool(removals()))
    assert removals() == [("plain", "addon-remove-prod")]
    run = Run.objects.get()
    assert (run.cluster_key, run.hook, run.moment) == ("u-plain", "BeforeClusterDelete", "")
    # The same Cluster seen again (a later change, a re-list) creates nothing new.
    obj = kube.get_object(*CLUSTERS, "fleet", "plain")
    assert obj is not None
    kube.put_object({**obj, "metadata": {**obj["metadata"], "annotations": {"touched": "yes"}}})
    watcher.removal_ensure(obj)
    time.sleep(1)
    assert removals() == [("plain", "addon-remove-prod")]


def test_the_watcher_survives_an_api_server_restart_and_resumes_where_it_was(
    tmp_path: Path, kube: KubeEmulator, running: watcher.Watcher
) -> None:
    apply(tmp_path, profile("prod"))
    listed = lists(kube)
    kube.stop()
    time.sleep(1.5)  # the watcher meets a closed port and backs off
    kube.put_object(cluster("plain", topology=False, deleting=True, uid="u-plain"))
    kube.start()
    wait_for("the removal run", lambda: bool(removals()))
    assert removals() == [("plain", "addon-remove-prod")]
    assert lists(kube) == listed, "resumed from its resourceVersion, without listing again"


def test_a_compacted_resource_version_makes_the_watcher_list_again(
    tmp_path: Path, kube: KubeEmulator, running: watcher.Watcher
) -> None:
    apply(tmp_path, profile("prod"))
    listed = lists(kube)
    kube.stop()
    kube.put_object(cluster("plain", topology=False, deleting=True, uid="u-plain"))
    kube.compact()
    kube.start()
    wait_for("the removal run", lambda: bool(removals()))
    assert removals() == [("plain", "addon-remove-prod")]
    assert lists(kube) > listed, "410 Gone: listed again"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _sample(text: str, name: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[-1])


def test_the_watcher_serves_its_health_and_counts_its_passes_and_removals(
    tmp_path: Path, kube: KubeEmulator, running: watcher.Watcher
) -> None:
    port = free_port()
    server = watcher.serve(running, port, host="127.0.0.1")
    base = f"http://127.0.0.1:{port}"
    try:
        apply(tmp_path, profile("prod"))
        _, before = _get(base + "/metrics")
        kube.put_object(cluster("plain", topology=False, deleting=True, uid="u-plain"))
        wait_for("the removal run", lambda: bool(removals()))
        seen_again = kube.get_object(*CLUSTERS, "fleet", "plain")
        assert seen_again is not None
        watcher.removal_ensure(seen_again)  # a later event for the same deletion
        kube.stop()
        wait_for(
            "a failed pass counted",
            lambda: (
                _sample(
                    _get(base + "/metrics")[1], 'hooksvc_watcher_passes_total{outcome="failed"}'
                )
                > _sample(before, 'hooksvc_watcher_passes_total{outcome="failed"}')
            ),
        )
        text = _get(base + "/metrics")[1]
        removed = "hooksvc_watcher_removals_total"
        assert _sample(text, removed) == _sample(before, removed) + 1
        assert _sample(text, 'hooksvc_watcher_passes_total{outcome="ok"}') >= 1
        # The API server being away is not a reason to restart the watcher...
        assert _get(base + "/healthz") == (200, "ok\n")
        assert _get(base + "/nothing")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


def test_a_watch_loop_that_stopped_turning_fails_its_health() -> None:
    stuck = watcher.Watcher(stop=threading.Event(), timeout_seconds=60)
    port = free_port()
    server = watcher.serve(stuck, port, host="127.0.0.1")
    try:
        assert _get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")
        stuck.last_pass -= stuck.stale_after_seconds + 1
        assert _get(f"http://127.0.0.1:{port}/healthz") == (503, "the watch loop is stuck\n")
    finally:
        server.shutdown()
        server.server_close()
