"""The emulator's workload controllers (`kube_apps.AppsControllers`), through the client.

Sources in kubernetes/kubernetes: pkg/controller/deployment/{sync,progress}.go,
pkg/controller/statefulset/stateful_set_control.go, pkg/controller/daemon/
daemon_controller.go; and an operator of a custom resource (`kube_apps.Operator`).
"""

from __future__ import annotations

import time
from typing import Any

import kubernetes
import pytest

from tests.kube_emulator.conftest import Api, eventually
from tests.support.kube import KubeEmulator
from tests.support.kube_apps import AppsControllers, Operator
from tests.support.kube_crds import definition


@pytest.fixture
def apps(api: Api) -> Api:
    return kubernetes.client.AppsV1Api(api)


def workload(name: str, replicas: int = 3, image: str = "app:1", **spec: Any) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "app", "image": image}]},
    }
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
            **spec,
        },
    }


def read(apps: Api, kind: str, name: str) -> Any:
    """The status of the Deployment, StatefulSet or DaemonSet `name` in default."""
    return getattr(apps, f"read_namespaced_{kind}")(name, "default").status


def test_a_deployment_is_observed_at_once_and_available_after_its_pods_are_ready(
    kube: KubeEmulator, apps: Api
) -> None:
    """deployment/sync.go: observedGeneration and the new ReplicaSet's replicas first;
    progress.go: Progressing NewReplicaSetAvailable once they are available."""
    kube.add_controller(AppsControllers(ready_after=0.3))
    apps.create_namespaced_deployment("default", workload("web"))
    eventually("observed", lambda: read(apps, "deployment", "web").observed_generation == 1)
    assert not read(apps, "deployment", "web").available_replicas
    eventually("available", lambda: read(apps, "deployment", "web").available_replicas == 3)
    conditions = read(apps, "deployment", "web").conditions
    progressing = next(c for c in conditions if c.type == "Progressing")
    assert progressing.reason == "NewReplicaSetAvailable"


def test_a_stuck_deployment_exceeds_its_progress_deadline(kube: KubeEmulator, apps: Api) -> None:
    """progress.go: Progressing False, reason ProgressDeadlineExceeded."""
    kube.add_controller(AppsControllers(stuck=["default/web"], deadline_seconds=0.1))
    apps.create_namespaced_deployment("default", workload("web"))

    def exceeded() -> bool:
        status = read(apps, "deployment", "web")
        return any(c.reason == "ProgressDeadlineExceeded" for c in status.conditions or [])

    eventually("the deadline", exceeded)
    assert not read(apps, "deployment", "web").available_replicas


def test_a_partitioned_statefulset_update_replaces_the_pods_from_the_partition_up(
    kube: KubeEmulator, apps: Api
) -> None:
    """stateful_set_control.go: with rollingUpdate.partition, pods with an ordinal below it
    keep the current revision; OnDelete replaces none."""
    kube.add_controller(AppsControllers())
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}
    apps.create_namespaced_stateful_set("default", workload("db", updateStrategy=strategy))
    eventually("created", lambda: read(apps, "stateful_set", "db").updated_replicas == 3)
    apps.patch_namespaced_stateful_set("db", "default", workload("db", image="app:2"))

    def updated() -> int:
        status = read(apps, "stateful_set", "db")
        return int(status.updated_replicas or 0) if status.observed_generation == 2 else -1

    eventually("updated", lambda: updated() == 1)
    on_delete = {"type": "OnDelete"}
    apps.create_namespaced_stateful_set("default", workload("cache", updateStrategy=on_delete))
    eventually("created", lambda: read(apps, "stateful_set", "cache").ready_replicas == 3)
    apps.patch_namespaced_stateful_set("cache", "default", workload("cache", image="app:2"))
    eventually("observed", lambda: read(apps, "stateful_set", "cache").observed_generation == 2)
    status = read(apps, "stateful_set", "cache")
    assert not status.updated_replicas
    assert status.update_revision != status.current_revision


def test_a_daemonset_runs_on_every_node(kube: KubeEmulator, apps: Api) -> None:
    """daemon_controller.go: desiredNumberScheduled is the number of eligible nodes."""
    kube.add_controller(AppsControllers(nodes=4))
    body = workload("agent")
    del body["spec"]["replicas"]
    apps.create_namespaced_daemon_set("default", body)
    eventually("available", lambda: read(apps, "daemon_set", "agent").number_available == 4)
    assert read(apps, "daemon_set", "agent").desired_number_scheduled == 4


def test_an_operator_clears_its_finalizer_only_while_its_deployment_runs(
    kube: KubeEmulator, apps: Api, custom: Api
) -> None:
    """The finalizers page (concepts/overview/working-with-objects/finalizers): a controller
    removes its finalizer after cleaning up; with its Pods gone, nobody does."""
    kube.put_object(definition("example.com", "Widget"))
    kube.add_controller(Operator("example.com", "widgets", "example.com/cleanup", "default/op"))
    apps.create_namespaced_deployment("default", workload("op", replicas=1))
    widgets = ("example.com", "v1", "default", "widgets")
    for name in ("first", "second"):
        body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}}
        custom.create_namespaced_custom_object(*widgets, body)
    eventually("finalizers", lambda: all(
        w["metadata"].get("finalizers") == ["example.com/cleanup"]
        for w in kube.list_objects("example.com", "v1", "widgets")
    ))  # fmt: skip
    custom.delete_namespaced_custom_object(*widgets, "first")
    eventually("first gone", lambda: len(kube.list_objects("example.com", "v1", "widgets")) == 1)
    apps.delete_namespaced_deployment("op", "default")
    custom.delete_namespaced_custom_object(*widgets, "second")
    time.sleep(0.3)
    [stuck] = kube.list_objects("example.com", "v1", "widgets")
    assert stuck["metadata"]["deletionTimestamp"]
    assert stuck["metadata"]["finalizers"] == ["example.com/cleanup"]
