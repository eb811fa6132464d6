"""`conformance` against the emulator: what it creates, how it reads results, what it cleans up.

The test plays the kubelet: it ends the Pod (`set_status`) and serves canned logs per
container (`set_pod_log`): the runner's e2e log, and the results container's JUnit file
between its markers. Covered: the Namespace, ServiceAccount, ClusterRoleBinding and Pod (both
containers) field by field, created once however often the start runs; the version chosen
per hook; counts and failed test names from the JUnit file, which is kept with the run and
downloadable in the admin; the e2e log summary when the JUnit file is missing, malformed or
oversized; the flaky allowlist and the pass threshold; cleanup after success, failure and
(through the engine) a timeout, with the two-hour default; the cancel cleanup task's
failure and retry paths (the worker tests cover the cleanup itself).
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.steps.conftest import CLUSTER, CLUSTER_UID, NS, Context, later, run, start
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator
from workflows import actions, cleanups, engine, errors
from workflows.models import Run, RunEvent, StepArtifact, StepRun
from workflows.steps import conformance, junit, registry

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
    kube: KubeEmulator, phase: str, log: str, junit_file: bytes | None = None, name: str = NAME
) -> None:
    kube.set_pod_log(name, "e2e-conformance", log, container="conformance")
    kube.set_pod_log(name, "e2e-conformance", results_log(junit_file), container="results")
    kube.set_status(*PODS, name, "e2e-conformance", {"phase": phase})


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
    [container, results] = pod["spec"]["containers"]
    assert container["name"] == "conformance"
    assert container["image"] == "registry.k8s.io/conformance:v1.33.0"
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "E2E_FOCUS": "Services",
        "E2E_SKIP": "Slow",
        "E2E_PARALLEL": "4",
        "E2E_PROVIDER": "skeleton",
        "E2E_VERBOSITY": "4",
        "RESULTS_DIR": conformance.RESULTS_DIR,
    }
    assert container["volumeMounts"] == [{"name": "results", "mountPath": conformance.RESULTS_DIR}]
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
        "junitError": "the runner wrote no JUnit file",
        "resultsFrom": "e2e log",
        "log": PASSED_LOG,
    }
    assert kube.get_object("", "v1", "namespaces", None, NAME) is None
    assert kube.get_object(*RBAC, None, NAME) is None


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
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


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_allowlisted_flaky_failures_do_not_count(kube: KubeEmulator, context: Context) -> None:
    ctx = conf(context, flakyAllowlist=["Services should serve endpoints", "lifecycle of Pods"])
    run(ctx)
    end_pod(kube, "Failed", FAILED_LOG)
    done = run(ctx)
    assert isinstance(done, registry.Done)
    assert done.output["flakyFailures"] == [SERVICES, PODS_TEST]
    assert done.output["passPercent"] == 100.0


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
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
    end_pod(kube, "Failed", FAILED_LOG, name="hooksvc-8-conformance")
    with pytest.raises(errors.PermanentError) as exc:
        run(strict)
    assert exc.value.message.startswith(
        "conformance: 2 of 404 tests failed (99.5% passed, 99.9% needed)"
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
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


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
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
    end_pod(kube, "Succeeded", "")  # the result is not read again
    assert isinstance(run(ctx), registry.Done)
    assert kube.get_object(*RBAC, None, NAME) is None


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_failures_are_read_from_the_junit_file_which_is_kept_with_the_run(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(kube, "Failed", FAILED_LOG, JUNIT)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    # The JUnit file's counts, not the e2e log summary's (402 passed, 2 failed).
    assert exc.value.message == (
        f"conformance: 1 of 4 tests failed (75% passed, 100% needed): {JUNIT_FAILED}"
    )
    output = exc.value.output
    assert output is not None
    assert {k: output[k] for k in ("resultsFrom", "junitFile", "passed", "failed", "skipped")} == {
        "resultsFrom": "junit",
        "junitFile": "junit_01.xml",
        "passed": 3,
        "failed": 1,
        "skipped": 5,
    }
    assert output["failedTests"] == [JUNIT_FAILED]
    assert "junitError" not in output
    artifact = StepArtifact.objects.get(step__run_id=7, step__name="conformance")
    assert (artifact.name, artifact.content_type, artifact.size) == (
        "junit_01.xml",
        "application/xml",
        len(JUNIT),
    )
    assert bytes(artifact.content) == JUNIT
    assert kube.get_object("", "v1", "namespaces", None, NAME) is None


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_the_junit_file_downloads_from_the_runs_admin_page(
    kube: KubeEmulator, context: Context, admin_client: Client
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(kube, "Failed", FAILED_LOG, JUNIT)
    with pytest.raises(errors.PermanentError):
        run(ctx)
    url = reverse("admin:workflows_run_artifact", args=[7, "conformance", "junit_01.xml"])
    page = admin_client.get(reverse("admin:workflows_run_change", args=[7])).content.decode()
    assert url in page
    assert f"({len(JUNIT)} bytes)" in page
    response = admin_client.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/xml"
    assert response["Content-Disposition"] == 'attachment; filename="junit_01.xml"'
    assert response.content == JUNIT
    missing = reverse("admin:workflows_run_artifact", args=[7, "conformance", "e2e.log"])
    assert admin_client.get(missing).status_code == 404


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_the_flaky_allowlist_and_the_threshold_apply_to_junit_results(
    kube: KubeEmulator, context: Context
) -> None:
    kubectl = "[sig-cli] Kubectl logs should be able to retrieve and filter logs [Conformance]"
    results = junit_xml(97, [JUNIT_FAILED, PODS_TEST, kubectl], 0)
    ctx = conf(context, flakyAllowlist=["Services should serve endpoints"], passThreshold=98)
    run(ctx)
    end_pod(kube, "Failed", FAILED_LOG, results)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        f"conformance: 2 of 99 tests failed (97.98% passed, 98% needed): {PODS_TEST}; {kubectl}"
    )
    lenient = conf(
        context, run_id=8, flakyAllowlist=["Services should serve endpoints"], passThreshold=97.9
    )
    run(lenient)
    end_pod(kube, "Failed", FAILED_LOG, results, name="hooksvc-8-conformance")
    done = run(lenient)
    assert isinstance(done, registry.Done)
    assert done.output["flakyFailures"] == [JUNIT_FAILED]
    assert (done.output["passPercent"], done.output["resultsFrom"]) == (97.98, "junit")


def _oversized() -> str:
    # Compresses to a few KB, inflates past the cap: refused before any XML parsing.
    return results_log(b"<testsuites>" + b" " * junit.MAX_BYTES + b"</testsuites>")


@pytest.mark.parametrize(
    ("results", "error", "kept"),
    [
        (
            lambda: results_log(b"<testsuites><testcase name='x'>"),
            "the JUnit file is not well-formed XML",
            True,
        ),
        (
            lambda: results_log(
                b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaa">]>'
                b"<testsuites>&a;</testsuites>"
            ),
            "the JUnit file declares a DTD, which is refused",
            True,
        ),
        (
            lambda: results_log(
                '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE t [<!ENTITY a "aaaa">]>'
                "<testsuites>&a;</testsuites>".encode("utf-16")
            ),
            "the JUnit file is not UTF-8",
            True,
        ),
        (
            lambda: results_log(b"<html/>"),
            "the JUnit file's root is <html>, not <testsuites>",
            True,
        ),
        (lambda: results_log(b"<testsuites/>"), "the JUnit file has no test cases", True),
        (_oversized, "the JUnit file is larger than 16 MiB", False),
        (
            lambda: f"{junit.BEGIN}\nnot base64!\n{junit.END}\n",
            "the JUnit file in the results container's log is corrupt",
            False,
        ),
        (
            lambda: f"{junit.BEGIN}\nH4sIAAAA\n",
            "the JUnit file in the results container's log is cut short",
            False,
        ),
        (lambda: "", "the results container printed no JUnit file", False),
    ],
    ids=[
        "malformed",
        "dtd",
        "utf16-dtd",
        "not-junit",
        "empty",
        "oversized",
        "corrupt",
        "cut-short",
        "none",
    ],
)
@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_an_unusable_junit_file_falls_back_to_the_e2e_log_summary(
    kube: KubeEmulator,
    context: Context,
    results: Callable[[], str],
    error: str,
    kept: bool,
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(kube, "Failed", FAILED_LOG)
    kube.set_pod_log(NAME, "e2e-conformance", results(), container="results")
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message.startswith("conformance: 2 of 404 tests failed")
    assert exc.value.output is not None
    assert (exc.value.output["resultsFrom"], exc.value.output["junitError"]) == ("e2e log", error)
    # A file that came out of the log whole is kept for a person to look at, even unparsed.
    assert StepArtifact.objects.filter(step__run_id=7).exists() is kept


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_an_unusable_junit_file_and_no_summary_fail_with_both_reasons(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(kube, "Failed", "panic: runtime error\n", b"<testsuites><testcase")
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert (
        exc.value.message
        == f"conformance Pod {NAME}/e2e-conformance ended Failed without a summary"
    )
    assert exc.value.output is not None
    assert exc.value.output["junitError"] == "the JUnit file is not well-formed XML"


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_a_runner_that_ended_is_read_after_a_few_polls_when_its_results_never_come(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    # A runner that crashed writes no `done`: the results container waits on, the Pod runs.
    kube.set_pod_log(NAME, "e2e-conformance", FAILED_LOG, container="conformance")
    statuses = [
        {"name": "conformance", "state": {"terminated": {"exitCode": 2}}},
        {"name": "results", "state": {"running": {}}},
    ]
    kube.set_status(
        *PODS, NAME, "e2e-conformance", {"phase": "Running", "containerStatuses": statuses}
    )
    waiting = registry.Poll(after=30, message="conformance tests ended; waiting for their results")
    assert [run(ctx) for _ in range(conformance.RESULTS_WAIT_POLLS)] == [waiting] * 3
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.output is not None
    assert exc.value.output["phase"] == "Failed"
    assert exc.value.output["junitError"] == "the results container printed no JUnit file"
    assert exc.value.output["failedTests"] == [SERVICES, PODS_TEST]
    assert kube.get_object("", "v1", "namespaces", None, NAME) is None


def test_suite_nodes_count_only_when_they_fail() -> None:
    content = junit_xml(2, ["[SynchronizedBeforeSuite]"], 1)
    assert junit.parse(content) == {
        "passed": 2,
        "failed": 1,
        "skipped": 1,
        "failedTests": ["[SynchronizedBeforeSuite]"],
    }
    leaf = b'<testsuite><testcase name="[It] [sig-node] Pods x" status="timedout"/></testsuite>'
    assert junit.parse(leaf)["failedTests"] == ["[sig-node] Pods x"]


def test_parse_results_takes_the_last_summary() -> None:
    assert conformance.parse_results("nothing here") == {}
    assert conformance.parse_results(FAILED_LOG + PASSED_LOG)["failed"] == 0


@pytest.mark.django_db
def test_the_engine_times_it_out_after_two_hours_by_default_and_it_cleans_up(
    kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_ = start(
        "AfterClusterUpgrade",
        [{"name": "conformance", "type": "conformance"}],
        name="conformance-after-upgrade",
    )
    step = StepRun.objects.get(run=run_)
    assert (step.state, step.timeout_seconds) == ("waiting", 7200)
    name = f"hooksvc-{run_.pk}-conformance"
    assert kube.get_object("", "v1", "namespaces", None, name) is not None
    later(monkeypatch, 7201)
    engine.run_step(step.pk)
    step.refresh_from_db()
    assert (step.state, step.message) == ("failed", "timed out after 7200 s")
    assert kube.get_object("", "v1", "namespaces", None, name) is None
    assert kube.get_object(*RBAC, None, name) is None


@pytest.mark.django_db
def test_a_template_timeout_replaces_the_default() -> None:
    run_ = start(
        "AfterClusterUpgrade",
        [{"name": "conformance", "type": "conformance", "timeoutSeconds": 600}],
        name="conformance-after-upgrade",
    )
    assert StepRun.objects.get(run=run_).timeout_seconds == 600


def cancelled_run(kube: KubeEmulator, capture: Any) -> tuple[Run, StepRun, str]:
    """A run whose conformance step started, then cancelled (the cleanup task not sent)."""
    run_ = start(
        "AfterClusterUpgrade",
        [{"name": "conformance", "type": "conformance"}],
        name="conformance-after-upgrade",
    )
    name = f"hooksvc-{run_.pk}-conformance"
    assert kube.get_object("", "v1", "namespaces", None, name) is not None
    with capture(execute=False) as callbacks:
        actions.run_cancel(run_id=run_.pk, actor="alice", reason="window closed")
    assert callbacks, "the cleanup is sent after the cancel commits"
    return run_, StepRun.objects.get(run=run_), name


@pytest.mark.django_db
def test_a_cleanup_that_fails_is_recorded_without_the_error_text(
    kube: KubeEmulator, django_capture_on_commit_callbacks: Any
) -> None:
    run_, step, name = cancelled_run(kube, django_capture_on_commit_callbacks)
    kube.fail_next("DELETE", "/clusterrolebindings/", 503)
    assert cleanups.step_cleanup(step.pk) is False
    event = RunEvent.objects.get(run=run_, name="cleanup")
    assert event.message == "cleanup of cancelled step conformance failed; see hooksvc logs"
    assert kube.get_object("", "v1", "namespaces", None, name) is not None
    assert cleanups.step_cleanup(step.pk) is True  # the task may run again; it deletes then
    assert kube.get_object("", "v1", "namespaces", None, name) is None


@pytest.mark.django_db
def test_a_cleanup_that_comes_after_a_retry_leaves_the_retry_alone(
    kube: KubeEmulator, django_capture_on_commit_callbacks: Any
) -> None:
    run_, step, name = cancelled_run(kube, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=False):
        actions.run_retry(run_id=run_.pk, actor="alice", reason="window open again")
    assert cleanups.step_cleanup(step.pk) is False
    assert not RunEvent.objects.filter(run=run_, name="cleanup").exists()
    assert kube.get_object("", "v1", "namespaces", None, name) is not None


@pytest.mark.django_db
def test_a_cleanup_that_meets_an_unreachable_api_is_retried_before_a_failure_is_recorded(
    kube: KubeEmulator, django_capture_on_commit_callbacks: Any
) -> None:
    run_, step, name = cancelled_run(kube, django_capture_on_commit_callbacks)
    kube.fail_next("DELETE", "/clusterrolebindings/", 503)
    with pytest.raises(cleanups.RetryLater):
        cleanups.step_cleanup(step.pk, retries_left=2)
    assert not RunEvent.objects.filter(run=run_, name="cleanup").exists(), "nothing said yet"
    assert kube.get_object("", "v1", "namespaces", None, name) is not None
    assert cleanups.step_cleanup(step.pk, retries_left=1) is True
    assert RunEvent.objects.get(run=run_, name="cleanup").message == (
        "cleanup of cancelled step conformance ran"
    )
    assert kube.get_object("", "v1", "namespaces", None, name) is None
