"""The emulator's kubelet and Pod admission as upstream's act, through the official client.

Each test cites the upstream source it follows (kubernetes v1.33 unless said otherwise):
a container that cannot start (`CreateContainerConfigError`, `CreateContainerError`,
`RunContainerError` / `StartError`), graceful deletion and the kubelet's ending of a Pod,
the log of a container that never ran, and the ServiceAccount admission plugin.
`tests/support/kube_kubelet.py` and `kube_admission.py` say what is modelled and what not.
"""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest

from tests.kube_emulator.conftest import Api
from tests.support import kube_workloads
from tests.support.kube import KubeEmulator
from tests.support.kube_store import Change, Store
from tests.support.kube_workloads import RuntimeFailure, Workloads


class _Reasons:
    """One Pod's committed changes: its first container's waiting reasons, in order, and
    its last status."""

    def __init__(self, name: str) -> None:
        self.name, self.reasons = name, list[str]()
        #: The status last committed, and whether the Pod is gone.
        self.last: dict[str, Any] = {}
        self.deleted = False

    def react(self, store: Store, change: Change) -> None:
        if change.plural != "pods" or change.new["metadata"]["name"] != self.name:
            return
        self.last = dict(change.new.get("status") or {})
        self.deleted = change.type == "DELETED"
        for status in ((change.new.get("status") or {}).get("containerStatuses") or [])[:1]:
            reason = ((status.get("state") or {}).get("waiting") or {}).get("reason")
            if reason and (not self.reasons or self.reasons[-1] != reason):
                self.reasons.append(reason)


def pod(name: str, image: str, restart: str = "Never", **container: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart,
            "containers": [{"name": "c0", "image": image, **container}],
        },
    }


def state(work: Workloads, name: str) -> dict[str, Any]:
    statuses = (work.pod("default", name).get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0].get("state") or {})


def phase(work: Workloads, name: str) -> str:
    return str((work.pod("default", name).get("status") or {}).get("phase", ""))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}],
            'secret "db" not found',
        ),
        (
            [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}],
            'configmap "cfg" not found',
        ),
    ],
    ids=["secret", "configmap"],
)
def test_a_missing_secret_or_config_map_is_create_container_config_error_until_it_exists(
    kube: KubeEmulator, core: Api, env: list[dict[str, Any]], message: str
) -> None:
    """pkg/kubelet/kuberuntime/kuberuntime_container.go `startContainer`: an error of
    `generateContainerConfig` (pkg/kubelet/kubelet_pods.go `makeEnvironmentVariables`: the
    referenced Secret or ConfigMap is not found) is `CreateContainerConfigError` with the
    error as message; the container waits (kubelet_pods.go `convertToAPIContainerStatuses`)
    and the Pod stays Pending; the next sync (pod_workers.go, 10 s) tries again, and once
    the object exists the container runs."""
    work = kube_workloads.start(kube, time_scale=0.001)
    core.create_namespaced_pod("default", pod("app", "app:1", env=env))
    work.wait(
        "the config error",
        lambda: state(work, "app").get("waiting", {}).get("reason") == "CreateContainerConfigError",
    )
    assert state(work, "app")["waiting"]["message"] == message
    assert phase(work, "app") == "Pending"
    kind, name = ("Secret", "db") if "secret" in message else ("ConfigMap", "cfg")
    data = {"password": "cGFzcw=="} if kind == "Secret" else {"mode": "safe"}
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": "default"},
            "data": data,
        }
    )
    work.wait("Running", lambda: phase(work, "app") == "Running")


def test_a_missing_key_names_the_key_and_the_object(kube: KubeEmulator, core: Api) -> None:
    """kubelet_pods.go `makeEnvironmentVariables`: "couldn't find key <key> in Secret
    <ns>/<name>" unless the reference is optional (an optional one is skipped)."""
    work = kube_workloads.start(kube, time_scale=0.001)
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "db", "namespace": "default"},
            "data": {},
        }
    )
    env = [
        {
            "name": "OPT",
            "valueFrom": {"secretKeyRef": {"name": "db", "key": "x", "optional": True}},
        },
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
    ]
    core.create_namespaced_pod("default", pod("app", "app:1", env=env))
    work.wait("the config error", lambda: state(work, "app").get("waiting"))
    assert state(work, "app")["waiting"] == {
        "reason": "CreateContainerConfigError",
        "message": "couldn't find key password in Secret default/db",
    }


def test_a_runtime_that_cannot_create_the_container_is_create_container_error(
    kube: KubeEmulator, core: Api
) -> None:
    """kuberuntime_container.go `startContainer`: the runtime's CreateContainer failing is
    `CreateContainerError` with the runtime's message, tried again at the next sync."""
    work = kube_workloads.start(kube, time_scale=0.001)
    work.runtime_fails("app:1", RuntimeFailure("create", "failed to reserve container name"))
    core.create_namespaced_pod("default", pod("app", "app:1"))
    work.wait("the create error", lambda: state(work, "app").get("waiting"))
    assert state(work, "app")["waiting"] == {
        "reason": "CreateContainerError",
        "message": "failed to reserve container name",
    }
    assert phase(work, "app") == "Pending"
    work.runtime_fails("app:1", None)
    work.wait("Running", lambda: phase(work, "app") == "Running")


def test_a_container_that_cannot_be_started_ends_with_start_error_or_waits_to_restart(
    kube: KubeEmulator, core: Api
) -> None:
    """kuberuntime_container.go `startContainer`: StartContainer failing is
    `RunContainerError`. containerd then reports the container exited, reason `StartError`,
    exit code 128 (containerd internal/cri/server/helpers.go), so a `Never` Pod's container
    is terminated and the Pod Failed (kubelet_pods.go: only a container to be restarted is
    shown waiting); an `Always` Pod's waits in RunContainerError, then CrashLoopBackOff."""
    work = kube_workloads.start(kube, time_scale=0.001)
    message = 'exec: "migrate": executable file not found in $PATH'
    work.runtime_fails("app:1", RuntimeFailure("start", message))
    core.create_namespaced_pod("default", pod("once", "app:1"))
    work.wait("Failed", lambda: phase(work, "once") == "Failed")
    ended = state(work, "once")["terminated"]
    assert (ended["reason"], ended["exitCode"], ended["message"]) == ("StartError", 128, message)
    assert ended["containerID"]
    recorder = _Reasons("loop")
    kube.add_controller(recorder)
    core.create_namespaced_pod("default", pod("loop", "app:1", restart="Always"))
    work.wait("CrashLoopBackOff", lambda: "CrashLoopBackOff" in recorder.reasons)
    assert recorder.reasons[:3] == ["ContainerCreating", "RunContainerError", "CrashLoopBackOff"]
    last = work.pod("default", "loop")["status"]["containerStatuses"][0]["lastState"]
    assert last["terminated"]["reason"] == "StartError"


def test_a_deleted_pod_is_stopped_by_its_kubelet_and_goes_after_its_grace_period(
    kube: KubeEmulator, core: Api
) -> None:
    """pkg/registry/core/pod/strategy.go `CheckGracefulDelete`: a bound Pod gets a
    deletionTimestamp and deletionGracePeriodSeconds (30, the default) and stays; its
    kubelet sends SIGTERM and, when the grace period ends, SIGKILL (exit 137); the status
    manager's `TerminatePod` (pkg/kubelet/status/status_manager.go) marks a container that
    never ran `ContainerStatusUnknown` (137, "The container could not be located when the
    pod was terminated") and the Pod Failed; then the kubelet deletes it for good."""
    work = kube_workloads.start(kube, time_scale=0.01)
    work.unpullable("sidecar:1")
    spec = pod("app", "app:1")
    spec["spec"]["containers"].append({"name": "c1", "image": "sidecar:1"})
    core.create_namespaced_pod("default", spec)
    work.wait("c0 to run", lambda: "running" in state(work, "app"))
    core.delete_namespaced_pod("app", "default")
    held = work.pod("default", "app")["metadata"]
    assert held["deletionGracePeriodSeconds"] == 30 and held["deletionTimestamp"]
    recorder = _Reasons("app")
    kube.add_controller(recorder)
    work.wait("the Pod to go", lambda: recorder.deleted)
    seen = recorder.last
    assert seen["phase"] == "Failed"
    c0, c1 = (s["state"]["terminated"] for s in seen["containerStatuses"])
    assert (c0["exitCode"], c0["reason"]) == (137, "Error")
    assert (c1["exitCode"], c1["reason"], c1["message"]) == (
        137,
        "ContainerStatusUnknown",
        "The container could not be located when the pod was terminated",
    )


def test_the_log_of_a_container_that_never_ran_is_a_400_saying_why(
    kube: KubeEmulator, core: Api
) -> None:
    """pkg/kubelet/kubelet_pods.go `validateContainerLogStatus`: no log for a container that
    waits to start ("... is waiting to start: trying and failing to pull image") or ended
    without ever running ("... is terminated"); kube-apiserver passes the kubelet's 400 on
    as BadRequest (apiserver pkg/registry/generic/rest/response_checker.go)."""
    work = kube_workloads.start(kube, time_scale=1.0)
    work.unpullable("app:1")
    core.create_namespaced_pod("default", pod("app", "app:1"))
    work.wait(
        "the back-off",
        lambda: state(work, "app").get("waiting", {}).get("reason") == "ImagePullBackOff",
    )
    with pytest.raises(kubernetes.client.ApiException) as exc:
        core.read_namespaced_pod_log("app", "default")
    assert exc.value.status == 400
    assert json.loads(exc.value.body or "{}")["message"] == (
        'container "c0" in pod "app" is waiting to start: trying and failing to pull image'
    )
    work.disrupt("default", "app")
    work.wait("Failed", lambda: phase(work, "app") == "Failed")
    with pytest.raises(kubernetes.client.ApiException) as exc:
        core.read_namespaced_pod_log("app", "default")
    assert (
        json.loads(exc.value.body or "{}")["message"] == 'container "c0" in pod "app" is terminated'
    )


def test_a_pod_without_its_service_account_is_refused_and_new_namespaces_get_default(
    kube: KubeEmulator, core: Api
) -> None:
    """plugin/pkg/admission/serviceaccount/admission.go `Admit`: a Pod's ServiceAccount
    (`default` when unset) must exist, else 403 "error looking up service account
    <ns>/<sa>: serviceaccount "<sa>" not found"; the serviceaccounts controller
    (pkg/controller/serviceaccount/serviceaccounts_controller.go) makes `default` in each
    namespace, so a Pod that names none is admitted."""
    work = kube_workloads.start(kube)
    core.create_namespace({"metadata": {"name": "team"}})
    work.wait(
        "team's default ServiceAccount",
        lambda: kube.get_object("", "v1", "serviceaccounts", "team", "default"),
    )
    made = core.create_namespaced_pod("team", pod("a", "x:1"))
    assert made.spec.service_account_name == "default"
    refused = pod("b", "x:1")
    refused["spec"]["serviceAccountName"] = "bot"
    with pytest.raises(kubernetes.client.ApiException) as exc:
        core.create_namespaced_pod("team", refused)
    assert exc.value.status == 403
    assert json.loads(exc.value.body or "{}")["message"] == (
        'pods "b" is forbidden: error looking up service account team/bot: serviceaccount'
        ' "bot" not found'
    )
