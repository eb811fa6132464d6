"""The Kubernetes API emulator, driven only through the official client over its socket.

One test per kube-apiserver behaviour the steps rely on: metadata, create answers,
generateName, Namespaces, replace and conflicts, the status subresource, server-side apply,
merge and JSON patches, selectors, watches, Status bodies, Secrets, deletion, the built-in
and CAPI/CSI/Velero resources, and the test helpers (faults, stop and start, set_status).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import kubernetes
import pytest
import urllib3
from kubernetes import watch
from kubernetes.client import ApiException

from tests.kube_emulator.conftest import Api
from tests.support.kube import KubeEmulator

CAPI = ("cluster.x-k8s.io", "v1beta2")


def cluster(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": name, "labels": {"env": "prod"}},
        "spec": spec,
    }


def new_watch() -> Any:
    return watch.Watch()  # type: ignore[no-untyped-call]  # the client's watch is untyped


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(str(exc.value.body))
    return body


def test_create_fills_metadata_with_an_increasing_resource_version(
    core: Api,
) -> None:
    first = core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    second = core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    assert first.metadata.uid and first.metadata.uid != second.metadata.uid
    assert first.metadata.creation_timestamp is not None
    assert first.metadata.namespace == "default"
    assert first.metadata.generation == 1
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)


def test_custom_object_create_answers_201_with_the_object(
    custom: Api,
) -> None:
    created = custom.create_namespaced_custom_object(*CAPI, "default", "clusters", cluster("c1"))
    assert created["metadata"]["name"] == "c1"
    assert created["metadata"]["resourceVersion"]
    _, code, _ = custom.create_namespaced_custom_object_with_http_info(
        *CAPI, "default", "clusters", cluster("c2")
    )
    assert code == 201


def test_generate_name_gets_a_random_suffix(core: Api) -> None:
    body = {"metadata": {"generateName": "job-"}}
    names = {core.create_namespaced_config_map("default", body).metadata.name for _ in range(3)}
    assert len(names) == 3
    assert all(name.startswith("job-") and len(name) == 9 for name in names)


def test_namespaces_can_be_created_read_listed_and_deleted(
    core: Api,
) -> None:
    created = core.create_namespace({"metadata": {"name": "fleet"}})
    assert created.status.phase == "Active"
    assert core.read_namespace("fleet").metadata.uid == created.metadata.uid
    assert "fleet" in {ns.metadata.name for ns in core.list_namespace().items}
    core.create_namespaced_secret("fleet", {"metadata": {"name": "s"}})
    core.delete_namespace("fleet")
    with pytest.raises(ApiException) as exc:
        core.read_namespace("fleet")
    assert exc.value.status == 404
    assert core.list_namespaced_secret("fleet").items == []


def test_creating_in_a_missing_namespace_is_not_found(core: Api) -> None:
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_config_map("nowhere", {"metadata": {"name": "a"}})
    assert exc.value.status == 404
    assert status_of(exc)["message"] == 'namespaces "nowhere" not found'


def test_replace_with_a_stale_resource_version_is_a_conflict(
    core: Api,
) -> None:
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    stale = created.metadata.resource_version
    created.data = {"k": "1"}
    replaced = core.replace_namespaced_config_map("a", "default", created)
    assert replaced.data == {"k": "1"}
    assert replaced.metadata.resource_version != stale
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_config_map(
            "a", "default", {"metadata": {"name": "a", "resourceVersion": stale}, "data": {}}
        )
    assert exc.value.status == 409
    assert status_of(exc)["reason"] == "Conflict"


def test_the_main_endpoint_ignores_status_and_the_status_endpoint_changes_only_status(
    custom: Api,
) -> None:
    created = custom.create_namespaced_custom_object(
        *CAPI, "default", "clusters", {**cluster("c1", paused=False), "status": {"phase": "Up"}}
    )
    assert "status" not in created
    patched = custom.patch_namespaced_custom_object(
        *CAPI, "default", "clusters", "c1", {"spec": {"paused": True}, "status": {"phase": "Up"}}
    )
    assert patched["spec"] == {"paused": True}
    assert "status" not in patched
    assert patched["metadata"]["generation"] == 2
    on_status = custom.patch_namespaced_custom_object_status(
        *CAPI, "default", "clusters", "c1", {"spec": {"paused": False}, "status": {"phase": "Up"}}
    )
    assert on_status["status"] == {"phase": "Up"}
    assert on_status["spec"] == {"paused": True}
    assert on_status["metadata"]["generation"] == 2


def test_server_side_apply_creates_when_missing_and_merges_when_present(
    custom: Api,
) -> None:
    manifest = cluster("c1", paused=False, topology={"version": "v1.33.0"})
    args = (*CAPI, "default", "clusters", "c1")
    _, code, _ = custom.patch_namespaced_custom_object_with_http_info(
        *args, manifest, field_manager="hooksvc", _content_type="application/apply-patch+yaml"
    )
    assert code == 201
    applied = custom.patch_namespaced_custom_object(
        *args,
        {**cluster("c1"), "spec": {"paused": True}},
        field_manager="hooksvc",
        _content_type="application/apply-patch+yaml",
    )
    assert applied["spec"] == {"paused": True, "topology": {"version": "v1.33.0"}}


def test_server_side_apply_without_a_field_manager_is_invalid(
    custom: Api,
) -> None:
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(
            *CAPI, "default", "clusters", "c1", cluster("c1"),
            _content_type="application/apply-patch+yaml",
        )  # fmt: skip
    assert exc.value.status == 422


def test_merge_patch_deletes_keys_set_to_null(core: Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}, "data": {"x": "1"}})
    patched = core.patch_namespaced_config_map(
        "a",
        "default",
        {"data": {"x": None, "y": "2"}},
        _content_type="application/merge-patch+json",
    )
    assert patched.data == {"y": "2"}


def test_json_patch_applies_operations_in_order(core: Api) -> None:
    body = {"metadata": {"name": "a", "labels": {"a": "1"}}, "data": {"x": "1"}}
    core.create_namespaced_config_map("default", body)
    patched = core.patch_namespaced_config_map(
        "a",
        "default",
        [
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "remove", "path": "/metadata/labels/a"},
            {"op": "replace", "path": "/data/x", "value": "3"},
        ],
    )
    assert patched.metadata.labels == {"b": "2"}
    assert patched.data == {"x": "3"}


def test_a_failed_json_patch_test_operation_is_invalid(core: Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}, "data": {"x": "1"}})
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_config_map(
            "a", "default", [{"op": "test", "path": "/data/x", "value": "2"}]
        )
    assert exc.value.status == 422
    assert core.read_namespaced_config_map("a", "default").data == {"x": "1"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["a", "b"]),
        ("app==web,tier=front", ["a"]),
        ("app!=web", ["c", "d"]),
        ("tier in (front,back)", ["a", "b", "c"]),
        ("tier notin (front)", ["b", "c", "d"]),
        ("tier", ["a", "b", "c"]),
        ("!tier", ["d"]),
    ],
)
def test_list_filters_by_label_selector(core: Api, selector: str, expected: list[str]) -> None:
    labels = {
        "a": {"app": "web", "tier": "front"},
        "b": {"app": "web", "tier": "back"},
        "c": {"app": "db", "tier": "back"},
        "d": {"app": "db"},
    }
    for name, values in labels.items():
        core.create_namespaced_config_map("default", {"metadata": {"name": name, "labels": values}})
    found = core.list_namespaced_config_map("default", label_selector=selector).items
    assert [cm.metadata.name for cm in found] == expected


def test_list_filters_by_field_selector_on_name_and_namespace(
    core: Api,
) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    core.create_namespaced_config_map("kube-system", {"metadata": {"name": "a"}})
    by_name = core.list_config_map_for_all_namespaces(field_selector="metadata.name=a").items
    assert [cm.metadata.namespace for cm in by_name] == ["default", "kube-system"]
    both = "metadata.name=a,metadata.namespace!=default"
    found = core.list_config_map_for_all_namespaces(field_selector=both).items
    assert [(cm.metadata.namespace, cm.metadata.name) for cm in found] == [("kube-system", "a")]


def test_watch_sends_matching_changes_after_a_resource_version(
    core: Api,
) -> None:
    start = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "a", "labels": {"w": "y"}}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    core.patch_namespaced_config_map("a", "default", {"data": {"k": "v"}})
    core.delete_namespaced_config_map("a", "default")
    events = new_watch().stream(
        core.list_namespaced_config_map,
        "default",
        label_selector="w=y",
        resource_version=start,
        timeout_seconds=1,
    )
    seen = [(event["type"], event["object"].metadata.name) for event in events]
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


def test_watch_field_selector_reports_live_changes(kube: KubeEmulator, custom: Api) -> None:
    custom.create_namespaced_custom_object(*CAPI, "default", "clusters", cluster("c1"))
    custom.create_namespaced_custom_object(*CAPI, "default", "clusters", cluster("c2"))
    watcher = new_watch()
    seen = []
    for event in watcher.stream(
        custom.list_namespaced_custom_object,
        *CAPI,
        "default",
        "clusters",
        field_selector="metadata.name=c1",
        timeout_seconds=5,
    ):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if event["type"] == "ADDED":
            kube.set_status(*CAPI, "clusters", "default", "c2", {"phase": "Provisioned"})
            kube.set_status(*CAPI, "clusters", "default", "c1", {"phase": "Provisioned"})
        else:
            watcher.stop()
    assert seen == [("ADDED", "c1"), ("MODIFIED", "c1")]


def test_watch_reports_objects_created_through_the_client_while_it_is_open(core: Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "first"}})
    watcher = new_watch()
    seen = []
    for event in watcher.stream(core.list_namespaced_config_map, "default", timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name))
        if event["object"].metadata.name == "first":
            core.create_namespaced_config_map("default", {"metadata": {"name": "second"}})
        else:
            watcher.stop()
    assert seen == [("ADDED", "first"), ("ADDED", "second")]


def test_watch_ends_after_timeout_seconds(core: Api) -> None:
    started = time.monotonic()
    events = list(
        new_watch().stream(
            core.list_namespaced_secret, "default", resource_version="0", timeout_seconds=1
        )
    )
    assert events == []
    assert 0.9 < time.monotonic() - started < 3


def test_watch_from_a_compacted_resource_version_is_gone(kube: KubeEmulator, core: Api) -> None:
    old = core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    kube.compact()
    with pytest.raises(ApiException) as exc:
        list(
            new_watch().stream(
                core.list_namespaced_config_map,
                "default",
                resource_version=old.metadata.resource_version,
                timeout_seconds=1,
            )
        )
    assert exc.value.status == 410


def test_errors_are_kubernetes_status_bodies_without_traceback(
    custom: Api,
) -> None:
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(*CAPI, "default", "clusters", "nope")
    assert status_of(missing) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'clusters.cluster.x-k8s.io "nope" not found',
        "reason": "NotFound",
        "code": 404,
        "details": {"name": "nope", "group": "cluster.x-k8s.io", "kind": "clusters"},
    }
    custom.create_namespaced_custom_object(*CAPI, "default", "clusters", cluster("c1"))
    with pytest.raises(ApiException) as exists:
        custom.create_namespaced_custom_object(*CAPI, "default", "clusters", cluster("c1"))
    assert exists.value.status == 409
    assert status_of(exists)["reason"] == "AlreadyExists"
    assert "traceback" not in str(exists.value.body)


def test_version_is_served(api: Api) -> None:
    version = kubernetes.client.VersionApi(api).get_code()
    assert (version.major, version.minor, version.git_version) == ("1", "33", "v1.33.1")


def test_secret_string_data_becomes_base64_data(core: Api) -> None:
    body = {"metadata": {"name": "s"}, "stringData": {"value": "apiVersion: v1"}}
    created = core.create_namespaced_secret("default", body)
    assert created.data == {"value": base64.b64encode(b"apiVersion: v1").decode()}
    assert created.string_data is None
    assert created.type == "Opaque"


def test_deleting_an_object_removes_it(core: Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    core.delete_namespaced_config_map("a", "default")
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_config_map("a", "default")
    assert exc.value.status == 404


def test_finalizers_hold_a_deleted_object_until_removed(
    core: Api,
) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "a", "finalizers": ["x"]}})
    core.delete_namespaced_config_map("a", "default")
    assert core.read_namespaced_config_map("a", "default").metadata.deletion_timestamp
    core.patch_namespaced_config_map(
        "a",
        "default",
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )
    assert core.list_namespaced_config_map("default").items == []


@pytest.mark.parametrize(
    ("group", "version", "plural", "namespaced"),
    [
        ("", "v1", "secrets", True),
        ("", "v1", "configmaps", True),
        ("", "v1", "pods", True),
        ("", "v1", "serviceaccounts", True),
        ("", "v1", "events", True),
        ("", "v1", "persistentvolumeclaims", True),
        ("apps", "v1", "deployments", True),
        ("apps", "v1", "statefulsets", True),
        ("apps", "v1", "daemonsets", True),
        ("batch", "v1", "jobs", True),
        ("rbac.authorization.k8s.io", "v1", "clusterroles", False),
        ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", False),
        ("rbac.authorization.k8s.io", "v1", "roles", True),
        ("rbac.authorization.k8s.io", "v1", "rolebindings", True),
        ("events.k8s.io", "v1", "events", True),
        ("cluster.x-k8s.io", "v1beta2", "clusters", True),
        ("cluster.x-k8s.io", "v1beta1", "clusters", True),
        ("snapshot.storage.k8s.io", "v1", "volumesnapshots", True),
        ("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses", False),
        ("velero.io", "v1", "backups", True),
    ],
)
def test_built_in_and_needed_custom_resources_are_served_empty(
    api: Api, group: str, version: str, plural: str, namespaced: bool
) -> None:
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    path = f"{prefix}/namespaces/default/{plural}" if namespaced else f"{prefix}/{plural}"
    response = api.call_api("GET", api.configuration.host + path)
    response.read()
    assert response.status == 200
    assert json.loads(response.data)["items"] == []


def test_cluster_scoped_snapshot_classes_take_no_namespace(
    custom: Api,
) -> None:
    body = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotClass",
        "metadata": {"name": "csi-retain"},
        "driver": "csi.example.com",
        "deletionPolicy": "Retain",
    }
    created = custom.create_cluster_custom_object(
        "snapshot.storage.k8s.io", "v1", "volumesnapshotclasses", body
    )
    assert "namespace" not in created["metadata"]


def test_pod_log_answers_what_the_test_set(kube: KubeEmulator, core: Api) -> None:
    core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": []}})
    kube.set_pod_log("default", "p", "one\ntwo\nthree\n")
    assert core.read_namespaced_pod_log("p", "default", tail_lines=2) == "two\nthree\n"


def test_pod_logs_are_per_container_and_a_pod_of_several_needs_one_named(
    kube: KubeEmulator, core: Api
) -> None:
    containers = [{"name": "runner", "image": "x"}, {"name": "results", "image": "y"}]
    core.create_namespaced_pod(
        "default", {"metadata": {"name": "p"}, "spec": {"containers": containers}}
    )
    kube.set_pod_log("default", "p", "tests ran\n", container="runner")
    kube.set_pod_log("default", "p", "<junit/>\n", container="results")
    assert core.read_namespaced_pod_log("p", "default", container="runner") == "tests ran\n"
    assert core.read_namespaced_pod_log("p", "default", container="results") == "<junit/>\n"
    assert (
        core.read_namespaced_pod_log("p", "default", container="runner", limit_bytes=5) == "tests"
    )
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod_log("p", "default")
    assert exc.value.status == 400
    assert status_of(exc)["reason"] == "BadRequest"
    assert status_of(exc)["message"] == (
        "a container name must be specified for pod p, choose one of: [runner results]"
    )
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod_log("p", "default", container="sidecar")
    assert status_of(exc)["message"] == "container sidecar is not valid for pod p"


def test_declared_resources_are_served(kube: KubeEmulator, custom: Api) -> None:
    kube.declare("example.com", "v1", "widgets", "Widget", namespaced=True)
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", body)
    assert kube.get_object("example.com", "v1", "widgets", "default", "w") is not None


def test_put_object_keeps_status_and_is_read_back_through_the_client(
    kube: KubeEmulator, custom: Api
) -> None:
    kube.put_object({**cluster("c1"), "metadata": {"name": "c1", "namespace": "default"},
                     "status": {"phase": "Provisioned"}})  # fmt: skip
    read = custom.get_namespaced_custom_object(*CAPI, "default", "clusters", "c1")
    assert read["status"] == {"phase": "Provisioned"}
    assert read["metadata"]["uid"]


def test_set_status_merges_and_bumps_the_resource_version(kube: KubeEmulator, custom: Api) -> None:
    created = custom.create_namespaced_custom_object(*CAPI, "default", "clusters", cluster("c1"))
    kube.set_status(*CAPI, "clusters", "default", "c1", {"phase": "Provisioning"})
    kube.set_status(*CAPI, "clusters", "default", "c1", {"initialization": {"ready": True}})
    read = custom.get_namespaced_custom_object(*CAPI, "default", "clusters", "c1")
    assert read["status"] == {"phase": "Provisioning", "initialization": {"ready": True}}
    assert int(read["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])


@pytest.mark.parametrize("code", [500, 429, 503, 403])
def test_fail_next_answers_the_injected_code_the_given_number_of_times(
    kube: KubeEmulator, core: Api, code: int
) -> None:
    kube.fail_next("GET", r"/configmaps$", code, times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            core.list_namespaced_config_map("default")
        assert exc.value.status == code
        assert status_of(exc)["code"] == code
    assert core.list_namespaced_config_map("default").items == []


def test_too_many_requests_carries_retry_after(kube: KubeEmulator, core: Api) -> None:
    kube.fail_next("*", r"/configmaps$", 429)
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_config_map("default")
    assert exc.value.headers is not None
    assert exc.value.headers["Retry-After"] == "1"
    assert status_of(exc)["reason"] == "TooManyRequests"


def test_delay_next_makes_a_client_time_out_once(kube: KubeEmulator, core: Api) -> None:
    kube.delay_next("GET", r"/configmaps$", 2.0)
    with pytest.raises(urllib3.exceptions.MaxRetryError) as exc:
        core.list_namespaced_config_map("default", _request_timeout=(1, 0.2))
    assert isinstance(exc.value.reason, urllib3.exceptions.ReadTimeoutError)
    assert core.list_namespaced_config_map("default", _request_timeout=(1, 0.2)).items == []


def test_stop_refuses_connections_and_start_serves_the_same_state_on_the_same_port(
    kube: KubeEmulator, core: Api
) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    port = kube.port
    kube.stop()
    with pytest.raises(urllib3.exceptions.MaxRetryError) as exc:
        core.read_namespaced_config_map("a", "default", _request_timeout=2)
    assert isinstance(exc.value.reason, urllib3.exceptions.NewConnectionError)
    kube.start()
    assert kube.port == port
    assert core.read_namespaced_config_map("a", "default").metadata.name == "a"


def test_reset_forgets_objects_and_faults(kube: KubeEmulator, core: Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    kube.fail_next("*", ".", 500)
    kube.reset()
    assert core.list_namespaced_config_map("default").items == []


class _MarksPodsScheduled:
    """A toy controller: each new Pod gets a status, then a later one, as a kubelet writes."""

    def react(self, store: Any, change: Any) -> None:
        if change.type != "ADDED" or change.plural != "pods":
            return
        meta = change.new["metadata"]
        key = ("", "v1", "pods")
        store.set_status(key, meta["namespace"], meta["name"], {"phase": "Pending"})
        store.later(
            0.2,
            lambda: store.set_status(key, meta["namespace"], meta["name"], {"phase": "Running"}),
        )


def test_a_controller_sees_each_change_and_acts_through_the_api_and_later(
    kube: KubeEmulator, core: Api
) -> None:
    kube.add_controller(_MarksPodsScheduled())
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    core.create_namespaced_pod("default", pod)
    phases: list[str] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and "Running" not in phases:
        phase = core.read_namespaced_pod("p", "default").status.phase
        if not phases or phases[-1] != phase:
            phases.append(phase)
        time.sleep(0.02)
    assert phases == ["Pending", "Running"]


def test_reset_switches_controllers_off_and_cancels_their_timers(
    kube: KubeEmulator, core: Api
) -> None:
    kube.add_controller(_MarksPodsScheduled())
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    core.create_namespaced_pod("default", pod)
    kube.reset()
    core.create_namespaced_pod("default", pod)
    time.sleep(0.4)
    assert core.read_namespaced_pod("p", "default").status is None or (
        core.read_namespaced_pod("p", "default").status.phase is None
    )
