"""`watch_clusters` against the emulator: removal for deleted Clusters CAPI calls no hook for.

Covers: a Cluster without a topology that gets a deletionTimestamp gets its removal runs
(and only the generated templates that match it); a Cluster with a topology is left to
the hook; the watcher survives the API server going away and resumes from its
resourceVersion without listing again; a compacted resourceVersion (410 Gone) makes it
list again; so do a resourceVersion the API server calls too large (after an etcd
restore) and an error event in the watch, while a throttled watch (429) resumes; /healthz
tells a loop the API server keeps refusing from one it cannot reach; handling a Cluster
twice creates nothing twice.

Upstream: kubernetes/client-go v0.36 `tools/cache/reflector.go` (`Reflector.watch`: 410
and other answered errors end the watch and the reflector lists again, 429 and a refused
connection back off and watch from the same version; `isTooLargeResourceVersionError`;
`VeryShortWatchError`); kube-apiserver's watch cache answers a too-large version with an
ERROR event, 504 Timeout, cause ResourceVersionTooLarge (apiserver storage/cacher
cacher.go Watch `newErrWatcher`, watch_cache.go waitUntilFreshAndBlock, storage/errors.go
NewTooLargeResourceVersionError).
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
    tmp_path: Path, kube: KubeEmulator, running: watcher.Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stop may cut a watch that had just begun, which client-go takes for a watch the
    # server ends at once (VeryShortWatchError) and lists again; this test is about the
    # refused connections that follow.
    monkeypatch.setattr(listwatch, "SHORTEST_WATCH_SECONDS", 0.0)
    apply(tmp_path, profile("prod"))
    listed = lists(kube)
    kube.stop()
    # Not a fixed pause, which a loaded machine could pass before the watcher tried at all.
    wait_for("the watcher to meet the closed port", lambda: running.failures > 0)
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
        assert _get(f"http://127.0.0.1:{port}/healthz") == (503, "the Clusters loop is stuck\n")
    finally:
        server.shutdown()
        server.server_close()


def test_after_an_etcd_restore_the_watcher_lists_again_rather_than_wait_for_its_version(
    tmp_path: Path, kube: KubeEmulator, running: watcher.Watcher
) -> None:
    """The restore takes resourceVersions back: the watcher's is now "too large". Resuming
    from it would miss every change until the store passed it again (the deleted Cluster
    below, made at a version under the watcher's); the reflector lists again instead."""
    apply(tmp_path, profile("prod"))
    kube.fresh_wait_seconds = 0.2
    before = kube.snapshot()
    for name in ("a", "b", "c"):
        kube.put_object(cluster(name, topology=False, deleting=False, uid=f"u-{name}"))
    wait_for("the watcher to see them", lambda: int(running.resource_version) >= before[0] + 3)
    listed = lists(kube)
    kube.restore(before)
    kube.put_object(cluster("plain", topology=False, deleting=True, uid="u-plain"))
    wait_for("the removal run", lambda: bool(removals()))
    assert removals() == [("plain", "addon-remove-prod")]
    assert lists(kube) > listed, "listed again"


@pytest.mark.parametrize(
    ("code", "reason"), [(500, "InternalError"), (504, "Timeout"), (403, "Forbidden")]
)
def test_an_error_event_in_the_watch_makes_the_watcher_list_again(
    tmp_path: Path, kube: KubeEmulator, running: watcher.Watcher, code: int, reason: str
) -> None:
    apply(tmp_path, profile("prod"))
    listed = lists(kube)
    kube.fail_next_watch("/clusters$", code, reason=reason)
    wait_for("a new list", lambda: lists(kube) > listed)
    kube.put_object(cluster("plain", topology=False, deleting=True, uid="u-plain"))
    wait_for("the removal run", lambda: bool(removals()))


def test_a_watch_the_server_ends_at_once_is_a_failure_that_lists_again(
    tmp_path: Path, kube: KubeEmulator, running: watcher.Watcher
) -> None:
    """client-go's reflector: a watch that ends within a second without an event is a
    VeryShortWatchError (handleAnyWatch), so the loop backs off and lists again rather than
    renew it in a tight loop."""
    apply(tmp_path, profile("prod"))
    listed = lists(kube)
    kube.end_next_watch("/clusters$", times=3)
    wait_for("a new list", lambda: lists(kube) > listed)
    kube.put_object(cluster("plain", topology=False, deleting=True, uid="u-plain"))
    wait_for("the removal run", lambda: bool(removals()))


def test_a_throttled_watch_resumes_from_its_version_without_listing(
    tmp_path: Path, kube: KubeEmulator, running: watcher.Watcher
) -> None:
    apply(tmp_path, profile("prod"))
    listed = lists(kube)
    kube.throttle_next("GET", "/clusters$", retry_after="1", times=3)
    kube.put_object(cluster("plain", topology=False, deleting=True, uid="u-plain"))
    wait_for("the removal run", lambda: bool(removals()))
    assert lists(kube) == listed, "a 429 is patience asked for, not a bad version"
    assert running.healthy()


def test_health_fails_when_the_api_server_keeps_refusing_not_when_it_is_away(
    kube: KubeEmulator, running: watcher.Watcher
) -> None:
    running.progress_deadline_seconds = 1.0
    kube.stop()
    threading.Event().wait(2.0)  # failing passes, over the deadline: no answer at all
    assert running.problem() == "", "an unreachable API server is no reason to restart"
    kube.start()
    kube.fail_next("GET", "/clusters", 500, times=1000)
    wait_for("the loop to report no progress", lambda: bool(running.problem()))
    assert running.problem() == (
        "the Clusters loop makes no progress: the API server has refused its lists and"
        " watches for over 1 s"
    )
    kube.reset()
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleet"}})
    wait_for("progress again", lambda: running.problem() == "")
