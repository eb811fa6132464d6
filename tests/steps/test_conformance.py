"""`conformance` against the emulator: what it creates, how it reads results, what it cleans up.

The emulator's kube-scheduler and kubelet run the Pod (tests/support/kube_workloads.py); the
test plays the processes in its two containers: each ends (`Workloads.exit`) having printed
its log, the runner's e2e log and the results container's JUnit file between its markers,
and the kubelet reports the Pod's phase. Covered here: the Namespace, ServiceAccount,
ClusterRoleBinding and Pod (both containers) field by field, created once however often the
start runs; the version chosen per hook; counts and failed test names from the e2e log
summary; the flaky allowlist and the pass threshold; a runner that ends without its results;
cleanup after success and failure. Elsewhere: the JUnit file (test_conformance_junit.py), how
the Pod runs and what stops it from starting (test_conformance_pod.py), the engine's timeout
and the cancel cleanup task (test_conformance_engine.py).
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Iterator

import pytest

from tests.steps.conftest import CLUSTER, CLUSTER_UID, NS, Context, run
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator, eventually
from tests.support.kube_workloads import Workloads
from workflows import errors
from workflows.models import Run, StepRun
from workflows.steps import conformance, junit, registry

RBAC = ("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
PODS = ("", "v1", "pods")
NAME = "hooksvc-7-conformance"
#: Hydrophone's container securityContext (pkg/conformance/deploy.go).
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "seccompProfile": {"type": "RuntimeDefault"},
}
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


def namespace_goes(kube: KubeEmulator, *, wait: bool = True) -> None:
    """The step deleted its Namespace: terminating at once, gone once its Pod has stopped
    (a running Pod is deleted gracefully; the kubelet stops it within the grace period,
    30 s unscaled: `wait=False` for a test that runs the kubelet at that scale)."""
    found = kube.get_object("", "v1", "namespaces", None, NAME)
    assert found is None or found["metadata"].get("deletionTimestamp"), "not deleted"
    if wait:
        eventually(
            "the Namespace to go", lambda: not kube.get_object("", "v1", "namespaces", None, NAME)
        )


def junit_xml(passed: int, failed: list[str], skipped: int) -> bytes:
    """A JUnit file shaped as the e2e suite's Ginkgo reporter writes it."""
    cases = ['<testcase name="[SynchronizedBeforeSuite]" status="passed" time="1.2"/>']
    cases += [
        f'<testcase name="[sig-apps] Passing test {i} [Conformance]" status="passed" time="3"/>'
        for i in range(passed)
    ]
    cases += [
        f'<testcase name="{name}" status="failed" time="9"><failure message="" type="failed">'
        "[FAILED] expected 1 endpoint, got 0</failure></testcase>"
        for name in failed
    ]
    cases += [
        f'<testcase name="[sig-storage] Skipped test {i} [Slow]" status="skipped" time="0">'
        '<skipped message="skipped"/></testcase>'
        for i in range(skipped)
    ]
    cases.append(
        '<testcase name="[ReportAfterSuite] Kubernetes e2e suite report" status="passed"/>'
    )
    body = "\n".join(cases)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>'
        f'<testsuite name="Kubernetes e2e suite" tests="{passed + len(failed) + skipped}">'
        f"{body}</testsuite></testsuites>\n"
    ).encode()


def results_log(content: bytes | None) -> str:
    """What the results container prints: gzip+base64 in 76-column lines, like busybox."""
    encoded = base64.encodebytes(gzip.compress(content)).decode() if content is not None else ""
    return f"{junit.BEGIN}\n{encoded}{junit.END}\n"


JUNIT_FAILED = "[sig-network] Services should serve endpoints on same port [Conformance]"
#: 3 passed specs, one failure, 5 skipped: counts the e2e log summaries above do not have.
JUNIT = junit_xml(3, [JUNIT_FAILED], 5)


def end_pod(
    work: Workloads,
    phase: str,
    log: str,
    junit_file: bytes | None = None,
    *,
    name: str = NAME,
    results: str | None = None,
) -> None:
    """The runner ends (exit 0 for Succeeded, 1 for Failed) having printed `log`, then the
    results container prints the JUnit file (or `results`); the kubelet ends the Pod."""
    work.wait("the Pod to run", lambda: pod_phase(work, name) == "Running")
    work.exit(name, "e2e-conformance", "conformance", 0 if phase == "Succeeded" else 1, log)
    printed = results_log(junit_file) if results is None else results
    work.exit(name, "e2e-conformance", "results", 0, printed)
    work.wait(phase, lambda: pod_phase(work, name) == phase)


def pod_phase(work: Workloads, name: str = NAME) -> str:
    return str((work.pod(name, "e2e-conformance").get("status") or {}).get("phase", ""))


@pytest.fixture
def steps() -> Iterator[None]:
    """The step rows of runs 7 and 8: the JUnit file is kept with the step."""
    for pk in (7, 8):
        run_ = Run.objects.create(
            pk=pk,
            template_name=f"conformance-{pk}",
            template_generation=1,
            spec=wf.spec(),
            hook="AfterClusterUpgrade",
            cluster_key=CLUSTER_UID,
            cluster_namespace=NS,
            cluster_name=CLUSTER,
        )
        StepRun.objects.create(run=run_, name="conformance", position=0, type="conformance")
    # Explicit ids leave the sequence alone: no test using these rows creates runs by it.
    yield


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
    assert run(ctx) == registry.Poll(
        after=30,
        message="conformance Pod is Pending",
        output={
            "image": "registry.k8s.io/conformance:v1.33.0",
            "parallelism": 4,
            "serialTests": "run one at a time after the others",
        },
    )
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
    [container, results] = pod["spec"]["containers"]
    assert container["name"] == "conformance"
    assert container["image"] == "registry.k8s.io/conformance:v1.33.0"
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "E2E_FOCUS": "Services",
        "E2E_SKIP": "Slow",
        "E2E_EXTRA_GINKGO_ARGS": "--procs=4",
        "E2E_PROVIDER": "skeleton",
        "E2E_VERBOSITY": "4",
        "RESULTS_DIR": conformance.RESULTS_DIR,
    }
    assert container["volumeMounts"] == [{"name": "results", "mountPath": conformance.RESULTS_DIR}]
    assert container["securityContext"] == RESTRICTED
    assert pod["spec"]["tolerations"] == [{"operator": "Exists"}]
    assert results == {
        "name": "results",
        "image": "registry.k8s.io/e2e-test-images/busybox:1.36.1-1",
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "sh",
            "-c",
            'until [ -f "$RESULTS_DIR/done" ]; do sleep 10; done; '
            'echo "hooksvc-results-begin junit_01.xml gzip+base64"; '
            'if [ -f "$RESULTS_DIR/junit_01.xml" ]; '
            'then gzip -c "$RESULTS_DIR/junit_01.xml" | base64; fi; '
            'echo "hooksvc-results-end"',
        ],
        "env": [{"name": "RESULTS_DIR", "value": conformance.RESULTS_DIR}],
        "volumeMounts": [
            {"name": "results", "mountPath": conformance.RESULTS_DIR, "readOnly": True}
        ],
        "securityContext": RESTRICTED,
    }
    assert pod["spec"]["volumes"] == [{"name": "results", "emptyDir": {}}]
    assert len(kube.list_objects(*RBAC)) == 1


BUSYBOX = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"


@pytest.mark.parametrize(
    ("hook", "params", "images"),
    [
        ("BeforeClusterUpgrade", {}, ("registry.k8s.io/conformance:v1.30.0", BUSYBOX)),
        ("AfterControlPlaneInitialized", {}, ("registry.k8s.io/conformance:v1.30.0", BUSYBOX)),
        (
            "AfterClusterUpgrade",
            {"registry": "mirror.local/k8s"},
            (
                "mirror.local/k8s/conformance:v1.33.0",
                "mirror.local/k8s/e2e-test-images/busybox:1.36.1-1",
            ),
        ),
        (
            "AfterClusterUpgrade",
            {"image": "mirror.local/conf:custom", "resultsImage": "mirror.local/busybox:1"},
            ("mirror.local/conf:custom", "mirror.local/busybox:1"),
        ),
    ],
)
def test_the_image_follows_the_version_the_cluster_runs_at_the_hook(
    kube: KubeEmulator,
    context: Context,
    hook: str,
    params: dict[str, str],
    images: tuple[str, str],
) -> None:
    run(context("conformance", params, hook=hook, step_name="conformance", **versions(hook)))
    [pod] = kube.list_objects(*PODS, NAME)
    assert tuple(c["image"] for c in pod["spec"]["containers"]) == images


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_a_passing_run_reports_counts_and_cleans_up(
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(workloads, "Succeeded", PASSED_LOG)
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert dict(done.output) == {
        "image": "registry.k8s.io/conformance:v1.33.0",
        "phase": "Succeeded",
        "parallelism": 1,
        "serialTests": "run",
        "passed": 404,
        "failed": 0,
        "skipped": 6793,
        "failedTests": [],
        "flakyFailures": [],
        "passPercent": 100.0,
        "junitError": "the runner wrote no JUnit file",
        "resultsFrom": "e2e log",
        "log": PASSED_LOG,
    }
    namespace_goes(kube)
    assert kube.get_object(*RBAC, None, NAME) is None


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_failures_are_reported_with_their_names_and_cleaned_up(
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(workloads, "Failed", FAILED_LOG)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        f"conformance: 2 of 404 tests failed (99.5% passed, 100% needed): {SERVICES}; {PODS_TEST}"
    )
    assert exc.value.output is not None
    assert exc.value.output["failedTests"] == [SERVICES, PODS_TEST]
    assert (exc.value.output["passed"], exc.value.output["failed"]) == (402, 2)
    assert "Summarizing 2 Failures" in exc.value.output["log"]
    namespace_goes(kube)
    assert kube.get_object(*RBAC, None, NAME) is None


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_allowlisted_flaky_failures_do_not_count(
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    ctx = conf(context, flakyAllowlist=["Services should serve endpoints", "lifecycle of Pods"])
    run(ctx)
    end_pod(workloads, "Failed", FAILED_LOG)
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert done.output["flakyFailures"] == [SERVICES, PODS_TEST]
    assert done.output["passPercent"] == 100.0


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_a_pass_threshold_tolerates_some_failures_but_not_more(
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    ctx = conf(context, passThreshold=99, flakyAllowlist=["lifecycle of Pods"])
    run(ctx)
    end_pod(workloads, "Failed", FAILED_LOG)
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert done.output["passPercent"] == 99.75
    strict = conf(context, passThreshold=99.9, run_id=8)
    run(strict)
    end_pod(workloads, "Failed", FAILED_LOG, name="hooksvc-8-conformance")
    with pytest.raises(errors.PermanentError) as exc:
        run(strict)
    assert exc.value.message.startswith(
        "conformance: 2 of 404 tests failed (99.5% passed, 99.9% needed)"
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_a_pod_that_ends_without_a_summary_fails_and_keeps_the_log(
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(
        workloads,
        "Failed",
        "standard_init_linux.go:228: exec user process caused: exec format error\n",
    )
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert (
        exc.value.message
        == f"conformance Pod {NAME}/e2e-conformance ended Failed without a summary"
    )
    assert exc.value.output is not None and "exec format error" in exc.value.output["log"]


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_a_cleanup_that_cannot_reach_the_cluster_is_retried_and_the_result_kept(
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(workloads, "Succeeded", PASSED_LOG)
    kube.fail_next("DELETE", "/clusterrolebindings/", 503)
    with pytest.raises(errors.TemporaryError):
        run(ctx)
    assert ctx.memo["result"]["ok"] is True
    kube.set_pod_log(NAME, "e2e-conformance", "", container="conformance")  # not read again
    assert isinstance(run(ctx), registry.Done)
    assert kube.get_object(*RBAC, None, NAME) is None


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_a_runner_that_ended_is_read_after_a_few_polls_when_its_results_never_come(
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    # A runner that crashed writes no `done`: the results container waits on, the Pod runs.
    workloads.wait("the Pod to run", lambda: pod_phase(workloads) == "Running")
    workloads.exit(NAME, "e2e-conformance", "conformance", 2, FAILED_LOG)
    workloads.wait(
        "the runner's end",
        lambda: (
            "terminated"
            in workloads.pod(NAME, "e2e-conformance")["status"]["containerStatuses"][0]["state"]
        ),
    )
    assert pod_phase(workloads) == "Running"
    waiting = registry.Poll(after=30, message="conformance tests ended; waiting for their results")
    assert [run(ctx) for _ in range(conformance.RESULTS_WAIT_POLLS)] == [waiting] * 3
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.output is not None
    assert exc.value.output["phase"] == "Failed"
    assert exc.value.output["junitError"] == "the results container printed no JUnit file"
    assert exc.value.output["failedTests"] == [SERVICES, PODS_TEST]
    namespace_goes(kube)


def test_parse_results_takes_the_last_summary() -> None:
    assert conformance.parse_results("nothing here") == {}
    assert conformance.parse_results(FAILED_LOG + PASSED_LOG)["failed"] == 0
