"""`conformance` when its Pod cannot be created or started, and what it leaves behind then.

Against the emulator's kubelet and admission plugins as upstream's act
(tests/support/kube_kubelet.py, kube_admission.py): a container the runtime cannot create
(`CreateContainerError`), a Pod the API server refuses (an exceeded ResourceQuota, 403),
a Pod evicted before its runner ever ran (whose log the kubelet refuses with a 400). In
each case the step ends with the reason, and the Namespace, the ServiceAccount and the
cluster-admin ClusterRoleBinding it made are deleted, also when the Pod never existed.
The grace is measured on the project's clock (workflows.clock), which the tests hold.
"""

from __future__ import annotations

import pytest

from tests.steps.conftest import Context, at_epoch, run, start
from tests.steps.test_conformance import NAME, conf, namespace_goes
from tests.support import kube_workloads
from tests.support.kube import KubeEmulator
from tests.support.kube_workloads import RuntimeFailure, Workloads
from workflows import errors
from workflows.engine import cleanups
from workflows.models import StepRun
from workflows.steps import registry

POD = "e2e-conformance"
IMAGE = "registry.k8s.io/conformance:v1.33.0"
RBAC = ("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "no-pods", "namespace": NAME},
    "spec": {"hard": {"pods": "0"}},
}
REFUSED = (
    'pods "e2e-conformance" is forbidden: exceeded quota: no-pods, requested: pods=1, used:'
    " pods=0, limited: pods=0"
)


def at(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    at_epoch(monkeypatch, 1_000_000.0 + seconds)


def nothing_left(kube: KubeEmulator, name: str = NAME, *, wait: bool = True) -> None:
    """No cluster-admin binding, and the Namespace (with its ServiceAccount) going."""
    assert kube.get_object(*RBAC, None, name) is None
    if name == NAME:
        namespace_goes(kube, wait=wait)


def quota_namespace(kube: KubeEmulator) -> None:
    """The step's Namespace already there with a quota of no pods, as a tenancy controller
    that puts a default ResourceQuota into every new namespace would leave it."""
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAME}})
    kube.put_object(QUOTA)


def test_a_runner_the_runtime_cannot_create_fails_after_the_grace_and_cleans_up(
    kube: KubeEmulator, workloads: Workloads, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubernetes v1.33 pkg/kubelet/kuberuntime/kuberuntime_container.go `startContainer`:
    a container the runtime cannot create waits in `CreateContainerError`, tried again at
    each sync; the Pod stays Pending for ever. Before, the step polled until its two-hour
    timeout; now it fails after `stuckGraceSeconds` with the reason."""
    workloads.runtime_fails(IMAGE, RuntimeFailure("create", "failed to reserve container name"))
    ctx = conf(context, stuckGraceSeconds=120)
    at(monkeypatch, 0)
    run(ctx)
    workloads.wait(
        "CreateContainerError",
        lambda: workloads.waiting_reason(NAME, POD, "conformance") == "CreateContainerError",
    )
    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert waiting.message == (
        "conformance Pod is Pending: container conformance cannot be created by the container"
        " runtime (CreateContainerError)"
    )
    at(monkeypatch, 120)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        f"conformance Pod {NAME}/{POD}: container conformance cannot be created by the"
        " container runtime (CreateContainerError)"
    )
    assert exc.value.output is not None
    assert exc.value.output["stuck"] == {
        "container": "conformance",
        "reason": "CreateContainerError",
        "detail": "failed to reserve container name",
    }
    nothing_left(kube)


def test_a_pod_the_api_server_refuses_fails_after_the_grace_and_nothing_is_left(
    kube: KubeEmulator, workloads: Workloads, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """apiserver pkg/admission/plugin/resourcequota/controller.go `checkRequest`: a Pod past
    the namespace's quota is refused, 403 "exceeded quota: ...". A quota frees up when other
    Pods end, so the step tries again at each poll, and only after `stuckGraceSeconds` fails
    with the reason (the API server's message in the output). Its Pod was never created,
    yet the Namespace, the ServiceAccount and the cluster-admin binding go: before, they
    stayed, the cleanup acting only once the Pod existed."""
    quota_namespace(kube)
    ctx = conf(context, stuckGraceSeconds=300)
    at(monkeypatch, 0)
    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert waiting.message == (
        "conformance Pod is not created yet: the Pod cannot be created (FailedCreate)"
    )
    assert kube.get_object(*RBAC, None, NAME) is not None
    at(monkeypatch, 299)
    assert isinstance(run(ctx), registry.Poll)
    at(monkeypatch, 300)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        f"conformance Pod {NAME}/{POD}: the Pod cannot be created (FailedCreate)"
    )
    assert exc.value.output is not None
    assert exc.value.output["stuck"] == {"reason": "FailedCreate", "detail": REFUSED}
    assert kube.get_object("", "v1", "pods", NAME, POD) is None
    nothing_left(kube)


def test_a_quota_freed_within_the_grace_lets_the_pod_be_created(
    kube: KubeEmulator, workloads: Workloads, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same refusal, healed: once the quota allows the Pod, the next poll creates it
    and the tests run."""
    quota_namespace(kube)
    ctx = conf(context)
    at(monkeypatch, 0)
    assert "FailedCreate" in run(ctx).message  # type: ignore[union-attr]
    kube.delete_object("", "v1", "resourcequotas", NAME, "no-pods")
    at(monkeypatch, 60)
    assert isinstance(run(ctx), registry.Poll)
    assert ctx.memo["image"] == IMAGE
    workloads.wait(
        "the Pod to run", lambda: workloads.pod(NAME, POD)["status"]["phase"] == "Running"
    )
    at(monkeypatch, 600)
    assert run(ctx) == registry.Poll(
        after=30,
        message="conformance Pod is Running",
        output={"image": IMAGE, "parallelism": 1, "serialTests": "run"},
    )
    assert "troubleSince" not in ctx.memo


def test_a_pod_evicted_before_its_runner_ran_ends_without_a_summary_not_a_log_error(
    kube: KubeEmulator, context: Context
) -> None:
    """A kubelet evicts a Pod whose runner image is still being pulled: the Pod is Failed,
    the runner terminated without ever running. The kubelet has no log of such a container
    and answers 400 (kubernetes pkg/kubelet/kubelet_pods.go `validateContainerLogStatus`:
    "... is terminated"). Before, the step failed with "log of Pod ...: API server
    answered 400 Bad Request"; now it reads no log and says the Pod ended without a
    summary, and cleans up."""
    work = kube_workloads.start(kube, time_scale=1.0)  # the pull backs off for 10 s
    work.unpullable(IMAGE)
    ctx = conf(context)
    run(ctx)
    work.wait("the failed pull", lambda: work.waiting_reason(NAME, POD, "conformance"))
    work.disrupt(NAME, POD)
    work.wait("Failed", lambda: work.pod(NAME, POD)["status"]["phase"] == "Failed")
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == f"conformance Pod {NAME}/{POD} ended Failed without a summary"
    assert exc.value.output is not None
    assert exc.value.output["log"] == ""
    nothing_left(kube)


@pytest.mark.django_db
def test_a_pod_create_the_engine_fails_leaves_no_cluster_admin_binding_behind(
    kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Pod create fails for good (422 Invalid, a PermanentError): the engine fails the
    step and runs its cleanup (workflows.step_cleanup). The step had made its Namespace,
    ServiceAccount and cluster-admin ClusterRoleBinding, but recorded no image, and the
    cleanup used to act only on one: the binding outlived the step in the workload cluster."""
    kube.fail_next("POST", "/namespaces/[^/]+/pods$", 422)
    run_ = start("AfterClusterUpgrade", [{"name": "conformance", "type": "conformance"}])
    name = f"hooksvc-{run_.pk}-conformance"
    step = StepRun.objects.get(run=run_)
    assert step.state == "failed"
    assert "image" not in step.memo
    assert kube.get_object(*RBAC, None, name) is not None, "made before the Pod"
    assert cleanups.step_cleanup(step.pk) is True
    assert kube.get_object(*RBAC, None, name) is None
    assert kube.get_object("", "v1", "namespaces", None, name) is None
    assert kube.list_objects("", "v1", "serviceaccounts", name) == []
