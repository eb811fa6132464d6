"""`conformance` against the emulator: what it creates, how it reads results, what it cleans up.

The test plays the kubelet: it ends the Pod (`set_status`) and serves a canned e2e log
(`set_pod_log`). Covered: the Namespace, ServiceAccount, ClusterRoleBinding and Pod field by
field, created once however often the start runs; the version chosen per hook; counts and
failed test names from the log summary; the flaky allowlist and the pass threshold; cleanup
after success, failure and (through the engine) a timeout, with the two-hour default.
"""

from __future__ import annotations

import datetime

import pytest

from tests.steps.conftest import CLUSTER, CLUSTER_UID, NS, Context, run
from tests.support import capi
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator
from workflows import engine, errors
from workflows.models import StepRun
from workflows.steps import conformance, registry

RBAC = ("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
PODS = ("", "v1", "pods")
NAME = "hooksvc-7-conformance"
SERVICES_IT = (
    "[sig-network] Services [It] should serve endpoints on same port and different protocols"
    " [Conformance]"
)
PODS_IT = (
    "[sig-node] Pods [It] should run through the lifecycle of Pods and PodStatus [Conformance]"
)
SERVICES, PODS_TEST = SERVICES_IT.replace(" [It]", ""), PODS_IT.replace(" [It]", "")

FAILED_LOG = f"""\
I1101 09:00:00.000000      17 e2e.go:117] Starting e2e run on Ginkgo node 1
Running Suite: Kubernetes e2e suite - /usr/local/bin
• [FAILED] [12.345 seconds]
------------------------------

Summarizing 2 Failures:
  [FAIL] {SERVICES_IT}
  k8s.io/kubernetes/test/e2e/network/service.go:3847
  [FAIL] {PODS_IT}
  k8s.io/kubernetes/test/e2e/common/node/pods.go:1034

Ran 404 of 7197 Specs in 5123.456 seconds
FAIL! -- 402 Passed | 2 Failed | 0 Pending | 6793 Skipped
"""
PASSED_LOG = """\
Ran 404 of 7197 Specs in 5011.002 seconds
SUCCESS! -- 404 Passed | 0 Failed | 0 Pending | 6793 Skipped
"""


def end_pod(kube: KubeEmulator, phase: str, log: str) -> None:
    kube.set_pod_log(NAME, "e2e-conformance", log)
    kube.set_status(*PODS, NAME, "e2e-conformance", {"phase": phase})


def conf(
    context: Context, hook: str = "AfterClusterUpgrade", run_id: int = 7, **params: object
) -> registry.StepContext:
    return context(
        "conformance", params, hook=hook, step_name="conformance", run_id=run_id, **versions(hook)
    )


def versions(hook: str) -> dict[str, str]:
    return {"kubernetesVersion": "v1.33.0"} if hook == "AfterClusterUpgrade" else {}


def test_it_creates_namespace_service_account_binding_and_pod_once(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = conf(context, focus="Services", skip="Slow", parallelism=4)
    assert run(ctx) == registry.Poll(after=30, message="conformance Pod is Pending")
    again = run(conf(context, focus="Services", skip="Slow", parallelism=4))
    assert isinstance(again, registry.Poll) and again.message == "conformance Pod is Pending"
    labels = {"hooksvc.io/run": "7", "hooksvc.io/step": "conformance"}
    namespace = kube.get_object("", "v1", "namespaces", None, NAME)
    assert namespace is not None and namespace["metadata"]["labels"] == labels
    account = kube.get_object("", "v1", "serviceaccounts", NAME, "conformance")
    assert account is not None
    binding = kube.get_object(*RBAC, None, NAME)
    assert binding is not None
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "cluster-admin",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "conformance", "namespace": NAME}
    ]
    [pod] = kube.list_objects(*PODS, NAME)
    assert pod["metadata"]["name"] == "e2e-conformance"
    assert pod["spec"]["serviceAccountName"] == "conformance"
    assert pod["spec"]["restartPolicy"] == "Never"
    [container] = pod["spec"]["containers"]
    assert container["image"] == "registry.k8s.io/conformance:v1.33.0"
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "E2E_FOCUS": "Services",
        "E2E_SKIP": "Slow",
        "E2E_PARALLEL": "4",
        "E2E_PROVIDER": "skeleton",
        "E2E_VERBOSITY": "4",
        "RESULTS_DIR": conformance.RESULTS_DIR,
    }
    assert len(kube.list_objects(*RBAC)) == 1


@pytest.mark.parametrize(
    ("hook", "params", "image"),
    [
        ("BeforeClusterUpgrade", {}, "registry.k8s.io/conformance:v1.30.0"),
        ("AfterControlPlaneInitialized", {}, "registry.k8s.io/conformance:v1.30.0"),
        (
            "AfterClusterUpgrade",
            {"registry": "mirror.local/k8s"},
            "mirror.local/k8s/conformance:v1.33.0",
        ),
        ("AfterClusterUpgrade", {"image": "mirror.local/conf:custom"}, "mirror.local/conf:custom"),
    ],
)
def test_the_image_follows_the_version_the_cluster_runs_at_the_hook(
    kube: KubeEmulator, context: Context, hook: str, params: dict[str, str], image: str
) -> None:
    run(context("conformance", params, hook=hook, step_name="conformance", **versions(hook)))
    [pod] = kube.list_objects(*PODS, NAME)
    assert pod["spec"]["containers"][0]["image"] == image


def test_a_passing_run_reports_counts_and_cleans_up(kube: KubeEmulator, context: Context) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(kube, "Succeeded", PASSED_LOG)
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert dict(done.output) == {
        "image": "registry.k8s.io/conformance:v1.33.0",
        "phase": "Succeeded",
        "passed": 404,
        "failed": 0,
        "skipped": 6793,
        "failedTests": [],
        "flakyFailures": [],
        "passPercent": 100.0,
        "log": PASSED_LOG,
    }
    assert kube.get_object("", "v1", "namespaces", None, NAME) is None
    assert kube.get_object(*RBAC, None, NAME) is None


def test_failures_are_reported_with_their_names_and_cleaned_up(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(kube, "Failed", FAILED_LOG)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        f"conformance: 2 of 404 tests failed (99.5% passed, 100% needed): {SERVICES}; {PODS_TEST}"
    )
    assert exc.value.output is not None
    assert exc.value.output["failedTests"] == [SERVICES, PODS_TEST]
    assert (exc.value.output["passed"], exc.value.output["failed"]) == (402, 2)
    assert "Summarizing 2 Failures" in exc.value.output["log"]
    assert kube.get_object("", "v1", "namespaces", None, NAME) is None
    assert kube.get_object(*RBAC, None, NAME) is None


def test_allowlisted_flaky_failures_do_not_count(kube: KubeEmulator, context: Context) -> None:
    ctx = conf(context, flakyAllowlist=["Services should serve endpoints", "lifecycle of Pods"])
    run(ctx)
    end_pod(kube, "Failed", FAILED_LOG)
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert done.output["flakyFailures"] == [SERVICES, PODS_TEST]
    assert done.output["passPercent"] == 100.0


def test_a_pass_threshold_tolerates_some_failures_but_not_more(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = conf(context, passThreshold=99, flakyAllowlist=["lifecycle of Pods"])
    run(ctx)
    end_pod(kube, "Failed", FAILED_LOG)
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert done.output["passPercent"] == 99.75
    strict = conf(context, passThreshold=99.9, run_id=8)
    run(strict)
    kube.set_pod_log("hooksvc-8-conformance", "e2e-conformance", FAILED_LOG)
    kube.set_status(*PODS, "hooksvc-8-conformance", "e2e-conformance", {"phase": "Failed"})
    with pytest.raises(errors.PermanentError) as exc:
        run(strict)
    assert exc.value.message.startswith(
        "conformance: 2 of 404 tests failed (99.5% passed, 99.9% needed)"
    )


def test_a_pod_that_ends_without_a_summary_fails_and_keeps_the_log(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(
        kube, "Failed", "standard_init_linux.go:228: exec user process caused: exec format error\n"
    )
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert (
        exc.value.message
        == f"conformance Pod {NAME}/e2e-conformance ended Failed without a summary"
    )
    assert exc.value.output is not None and "exec format error" in exc.value.output["log"]


def test_a_cleanup_that_cannot_reach_the_cluster_is_retried_and_the_result_kept(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(kube, "Succeeded", PASSED_LOG)
    kube.fail_next("DELETE", "/clusterrolebindings/", 503)
    with pytest.raises(errors.TemporaryError):
        run(ctx)
    assert ctx.memo["result"]["ok"] is True
    kube.set_pod_log(NAME, "e2e-conformance", "")  # the result is not read again
    assert isinstance(run(ctx), registry.Done)
    assert kube.get_object(*RBAC, None, NAME) is None


def test_parse_results_takes_the_last_summary() -> None:
    assert conformance.parse_results("nothing here") == {}
    assert conformance.parse_results(FAILED_LOG + PASSED_LOG)["failed"] == 0


@pytest.mark.django_db
def test_the_engine_times_it_out_after_two_hours_by_default_and_it_cleans_up(
    kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = wf.template(
        "conformance-after-upgrade",
        hook="AfterClusterUpgrade",
        steps=[{"name": "conformance", "type": "conformance"}],
    )
    cluster = capi.cluster_v1beta2(name=CLUSTER, namespace=NS, uid=CLUSTER_UID)
    [run_] = engine.runs_ensure(
        templates=[template], call=wf.call("AfterClusterUpgrade", cluster=cluster)
    )
    engine.advance(run_.pk)
    step = StepRun.objects.get(run=run_)
    assert (step.state, step.timeout_seconds) == ("waiting", 7200)
    name = f"hooksvc-{run_.pk}-conformance"
    assert kube.get_object("", "v1", "namespaces", None, name) is not None
    later = engine.clock() + datetime.timedelta(seconds=7201)
    monkeypatch.setattr(engine, "clock", lambda: later)
    engine.run_step(step.pk)
    step.refresh_from_db()
    assert (step.state, step.message) == ("failed", "timed out after 7200 s")
    assert kube.get_object("", "v1", "namespaces", None, name) is None
    assert kube.get_object(*RBAC, None, name) is None


@pytest.mark.django_db
def test_a_template_timeout_replaces_the_default() -> None:
    template = wf.template(
        "conformance-after-upgrade",
        hook="AfterClusterUpgrade",
        steps=[{"name": "conformance", "type": "conformance", "timeoutSeconds": 600}],
    )
    cluster = capi.cluster_v1beta2(name=CLUSTER, namespace=NS, uid=CLUSTER_UID)
    [run_] = engine.runs_ensure(
        templates=[template], call=wf.call("AfterClusterUpgrade", cluster=cluster)
    )
    engine.advance(run_.pk)
    assert StepRun.objects.get(run=run_).timeout_seconds == 600
