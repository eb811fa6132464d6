"""`conformance` reading the runner's JUnit file, against the emulator's kubelet.

The results container prints `junit_01.xml` into its log (see `workflows.steps.junit`); the
counts and failed tests' names come from it, it is kept with the run and downloadable in the
admin, and the flaky allowlist and the pass threshold apply to it. A file that is missing,
cut short, corrupt, oversized, not UTF-8, has a DTD or is not JUnit falls back to the e2e log
summary, saying why. `tests/steps/test_conformance.py` has the rest of the step.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client
from django.urls import reverse

from tests.steps.conftest import Context, run
from tests.steps.test_conformance import (
    FAILED_LOG,
    JUNIT,
    JUNIT_FAILED,
    NAME,
    PODS_TEST,
    conf,
    end_pod,
    junit_xml,
    namespace_goes,
    results_log,
    steps,  # noqa: F401 (a fixture, used by name)
)
from tests.support.kube import KubeEmulator
from tests.support.kube_workloads import Workloads
from workflows import errors
from workflows.models import StepArtifact
from workflows.steps import junit, registry


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_failures_are_read_from_the_junit_file_which_is_kept_with_the_run(
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(workloads, "Failed", FAILED_LOG, JUNIT)
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
    namespace_goes(kube)


@pytest.mark.django_db
@pytest.mark.usefixtures("steps")
def test_the_junit_file_downloads_from_the_runs_admin_page(
    kube: KubeEmulator, workloads: Workloads, context: Context, admin_client: Client
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(workloads, "Failed", FAILED_LOG, JUNIT)
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
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    kubectl = "[sig-cli] Kubectl logs should be able to retrieve and filter logs [Conformance]"
    results = junit_xml(97, [JUNIT_FAILED, PODS_TEST, kubectl], 0)
    ctx = conf(context, flakyAllowlist=["Services should serve endpoints"], passThreshold=98)
    run(ctx)
    end_pod(workloads, "Failed", FAILED_LOG, results)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        f"conformance: 2 of 99 tests failed (97.98% passed, 98% needed): {PODS_TEST}; {kubectl}"
    )
    lenient = conf(
        context, run_id=8, flakyAllowlist=["Services should serve endpoints"], passThreshold=97.9
    )
    run(lenient)
    end_pod(workloads, "Failed", FAILED_LOG, results, name="hooksvc-8-conformance")
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
    workloads: Workloads,
    context: Context,
    results: Callable[[], str],
    error: str,
    kept: bool,
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(workloads, "Failed", FAILED_LOG, results=results())
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
    kube: KubeEmulator, workloads: Workloads, context: Context
) -> None:
    ctx = conf(context)
    run(ctx)
    end_pod(workloads, "Failed", "panic: runtime error\n", b"<testsuites><testcase")
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert (
        exc.value.message
        == f"conformance Pod {NAME}/e2e-conformance ended Failed without a summary"
    )
    assert exc.value.output is not None
    assert exc.value.output["junitError"] == "the JUnit file is not well-formed XML"


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
