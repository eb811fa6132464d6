"""`conformance`: runs Kubernetes conformance tests in the workload cluster, as Hydrophone does.

The step makes its own Namespace, a ServiceAccount there, a ClusterRoleBinding of it to
`cluster-admin`, and a Pod running `registry.k8s.io/conformance:<version>`
(major.minor.patch, as Hydrophone takes the server's version). The image's go-runner reads
E2E_FOCUS, E2E_SKIP and E2E_EXTRA_GINKGO_ARGS; its E2E_PARALLEL means parallel only for
`y`/`true`, and then it also skips `[Serial]` when E2E_SKIP is empty, so the step never sets
it: `parallelism` N > 1 becomes `--procs=N` as Hydrophone passes it, and `serialTests` alone
decides whether `[Serial]` specs are skipped. Both containers run as Hydrophone's do, within
PodSecurity `restricted`, and the Pod tolerates every taint unless the template says
otherwise (its tolerations are checked when the template is applied, as kube-apiserver
checks them: `tolerations`). A Pod the API server refuses (403: a quota, a policy; tried
again at each poll), a Pod that cannot be scheduled, a container that cannot be pulled,
configured, created or started or keeps crashing, or a Pod still Pending for any other
reason (Hydrophone's start timeout) fails the step once that lasted `stuckGraceSeconds` (see
`pods`). A second container, `results` (busybox), shares the results directory and prints
the runner's JUnit file into its log once the runner is done (see `junit`): there is no exec
without websockets, but a log can be read. When the runner ends, the counts and the failed
tests' names come from that JUnit file, which is kept with the run (a `StepArtifact`);
without a readable JUnit file they come from the e2e log summary in the runner's log. An
allowlist of known-flaky tests and a pass threshold decide success. Whatever the outcome,
the step deletes the Namespace and the ClusterRoleBinding before it reports it; when the
engine fails the step itself (timeout, retries spent, an error it raised) or an operator
cancels it, `cleanup` does, whether or not the Pod was ever created: the cluster-admin
binding must not outlive the step.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from workflows import errors
from workflows.kube import k8s
from workflows.steps import artifacts, junit, objects, pods, registry, tolerations

RBAC_API = "rbac.authorization.k8s.io/v1"
SERVICE_ACCOUNT = "conformance"
POD = "e2e-conformance"
RUNNER = "conformance"
RESULTS = "results"
#: The busybox of the e2e test images: a site that mirrors conformance has it already.
RESULTS_IMAGE = "e2e-test-images/busybox:1.36.1-1"
#: Polls to wait, once the runner ended, for the results container to print the JUnit file.
RESULTS_WAIT_POLLS = 3
#: Lines read from the end of the Pod's log: the summary and the failure list are there.
LOG_LINES = 3000
#: The excerpt kept in the step's output.
EXCERPT_CHARS = 16000
DEFAULT_TIMEOUT_SECONDS = 7200
#: Where the runner writes e2e.log and the JUnit file: the Pod's own emptyDir.
# A path inside the Pod, not on this host.
RESULTS_DIR = "/tmp/results"  # noqa: S108  # nosec B108
#: What E2E_SKIP gets for `serialTests: skip` (go-runner's own regexp for them).
SERIAL_SKIP = r"\[Serial\]"
#: Hydrophone's: tolerate every taint, so control-plane-only clusters run it too.
TOLERATE_ALL = ({"operator": "Exists"},)
#: Hydrophone's user (nobody) for both containers: PodSecurity `restricted` needs non-root.
RUN_AS_USER = 65534

# Ginkgo's summary: "Ran 402 of 7000 Specs ...", then "FAIL! -- 400 Passed | 2 Failed |
# 0 Pending | 6598 Skipped"; before it "Summarizing 2 Failures:" and one "[FAIL] ..." line each.
_COUNTS = re.compile(
    r"(\d+) Passed \| (\d+) Failed \| (?:\d+ Flaked \| )?(\d+) Pending \| (\d+) Skipped"
)
_FAILURE = re.compile(r"^\s*\[(?:FAIL|TIMEDOUT|PANICKED|INTERRUPTED)\]\s+(.*\S)\s*$")


def _check_threshold(value: float) -> float:
    if not 0 <= value <= 100:
        raise registry.ParamError("", "must be a percentage from 0 to 100")
    return value


PARAMS = {
    "registry": registry.Param(str, default="registry.k8s.io"),
    #: The whole image reference; overrides registry and version.
    "image": registry.Param(str),
    #: The results container's image (busybox: sh, gzip, base64); by default from `registry`.
    "resultsImage": registry.Param(str),
    #: The cluster's Kubernetes version; by default the version the hook reports.
    "version": registry.Param(str),
    "focus": registry.Param(str, default=r"\[Conformance\]"),
    "skip": registry.Param(str, default=""),
    #: Ginkgo processes (`--procs`); 1 runs every spec in one process.
    "parallelism": registry.Param(int, default=1, minimum=1),
    #: `run`: `[Serial]` specs run too (with parallelism, one at a time after the others);
    #: `skip`: they are skipped.
    "serialTests": registry.Param(str, default="run", choices=("run", "skip")),
    #: The Pod's tolerations; by default every taint is tolerated, as Hydrophone does.
    #: Checked when the template is applied, as kube-apiserver checks them (`tolerations`).
    "tolerations": registry.Param(
        list,
        default=list(TOLERATE_ALL),
        check=tolerations.check,
        items=registry.Param(dict),
    ),
    #: How long the Pod may be refused by the API server or stay unscheduled, or a
    #: container wait unpulled, unable to start or crashing, before the step fails.
    "stuckGraceSeconds": registry.Param((int, float), default=300, minimum=0),
    #: Test names (or parts of them) whose failure does not count.
    "flakyAllowlist": registry.Param(
        list, default=[], check=objects.check_strings, items=objects.STRING
    ),
    #: The share of counted tests that must pass, in percent.
    "passThreshold": registry.Param((int, float), default=100, check=_check_threshold),
    "pollSeconds": registry.Param((int, float), default=30, minimum=1),
}


def _version(ctx: registry.StepContext) -> str:
    """The version the cluster runs at this hook: conformance tests must match the server."""
    context = ctx.run_context
    # After an upgrade step the cluster runs kubernetesVersion; before one it still runs
    # fromKubernetesVersion; at other hooks, the topology's version.
    version = str(
        ctx.params.get("version")
        or context.get("kubernetesVersion")
        or context.get("fromKubernetesVersion")
        or ctx.cluster.get("topologyVersion")
        or ""
    )
    if not version:
        raise errors.PermanentError("no Kubernetes version known for the conformance image")
    # The release's own version, as Hydrophone takes it (cmd/root.go `normalizeVersion`,
    # semver FinalizeVersion): build metadata (v1.30.2+k3s1; `+` is not allowed in a tag)
    # and a pre-release part (a distribution's v1.33.2-eks-931bdca) are no tag of
    # registry.k8s.io/conformance.
    core = re.match(r"v?(\d+\.\d+\.\d+)", version)
    if core is None:
        version = version.split("+", 1)[0]
        return version if version.startswith("v") else f"v{version}"
    return f"v{core.group(1)}"


def _names(ctx: registry.StepContext) -> dict[str, str]:
    name = ctx.object_name()
    return {"namespace": name, "clusterRoleBinding": name}


def _create(
    ctx: registry.StepContext, api: k8s.ApiClient, image: str, results_image: str
) -> pods.Trouble | None:
    """Everything the tests need, the Pod last; the trouble if the API server refused it."""
    names = _names(ctx)
    ns, labels = names["namespace"], objects.labels(ctx)
    objects.ensure(
        api,
        objects.path("v1", "namespaces"),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}},
        what=f"Namespace {ns}",
    )
    objects.ensure(
        api,
        objects.path("v1", "serviceaccounts", ns),
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": ns, "labels": labels},
        },
        what=f"ServiceAccount {ns}/{SERVICE_ACCOUNT}",
    )
    objects.ensure(
        api,
        objects.path(RBAC_API, "clusterrolebindings"),
        {
            "apiVersion": RBAC_API,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": names["clusterRoleBinding"], "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": ns}],
        },
        what=f"ClusterRoleBinding {names['clusterRoleBinding']}",
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": ns, "labels": labels},
        "spec": {
            "serviceAccountName": SERVICE_ACCOUNT,
            "restartPolicy": "Never",
            "tolerations": list(ctx.params["tolerations"]),
            "containers": [
                {
                    "name": RUNNER,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "env": [{"name": k, "value": v} for k, v in runner_env(ctx.params).items()],
                    "volumeMounts": [{"name": "results", "mountPath": RESULTS_DIR}],
                    "securityContext": _restricted(),
                },
                {
                    "name": RESULTS,
                    "image": results_image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", junit.SCRIPT],
                    "env": [{"name": "RESULTS_DIR", "value": RESULTS_DIR}],
                    "volumeMounts": [
                        {"name": "results", "mountPath": RESULTS_DIR, "readOnly": True}
                    ],
                    "securityContext": _restricted(),
                },
            ],
            "volumes": [{"name": "results", "emptyDir": {}}],
        },
    }
    try:
        objects.ensure(api, objects.path("v1", "pods", ns), pod, what=f"Pod {ns}/{POD}")
    except k8s.Forbidden as exc:
        if exc.status != 403:
            raise
        # Admission refused it (a quota, a policy): that can pass, so it is trouble with a
        # grace, not a failure; a 422 (invalid) cannot, and fails the step.
        return pods.refused(exc)
    return None


def runner_env(params: Mapping[str, Any]) -> dict[str, str]:
    """go-runner's environment: E2E_PARALLEL is left unset (go-runner's default, serial), so
    that it neither adds `--p` nor skips `[Serial]` on its own."""
    skip = params["skip"]
    if params["serialTests"] == "skip":
        skip = f"{skip}|{SERIAL_SKIP}" if skip else SERIAL_SKIP
    env = {
        "E2E_FOCUS": params["focus"],
        "E2E_SKIP": skip,
        "E2E_PROVIDER": "skeleton",
        "E2E_VERBOSITY": "4",
        "RESULTS_DIR": RESULTS_DIR,
    }
    if params["parallelism"] > 1:
        env["E2E_EXTRA_GINKGO_ARGS"] = f"--procs={params['parallelism']}"
    return env


def _restricted() -> dict[str, Any]:
    """A container securityContext within PodSecurity `restricted`, as Hydrophone sets it."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _run_output(params: Mapping[str, Any]) -> dict[str, Any]:
    """How the tests ran, for the output: Ginkgo processes and what became of `[Serial]`."""
    serial = "skipped" if params["serialTests"] == "skip" else "run"
    if serial == "run" and params["parallelism"] > 1:
        serial = "run one at a time after the others"
    return {"parallelism": params["parallelism"], "serialTests": serial}


def _delete(ctx: registry.StepContext, api: k8s.ApiClient) -> None:
    names = _names(ctx)
    objects.delete(
        api,
        objects.path(RBAC_API, "clusterrolebindings", name=names["clusterRoleBinding"]),
        what=f"ClusterRoleBinding {names['clusterRoleBinding']}",
    )
    # The Namespace takes the ServiceAccount and the Pod with it.
    objects.delete(
        api,
        objects.path("v1", "namespaces", name=names["namespace"]),
        what=f"Namespace {names['namespace']}",
    )


def cleanup(ctx: registry.StepContext) -> None:
    """Deletes the Namespace and the ClusterRoleBinding (timeout, failure, cancel).

    Whatever the memo says: an attempt may have made the Namespace, the ServiceAccount and
    the cluster-admin binding and then failed (its Pod refused) or died before it recorded
    anything. The names are the run's and step's, and deleting what is gone is a no-op.
    """
    _delete(ctx, objects.workload(ctx))


def parse_results(log: str) -> dict[str, Any]:
    """Counts and failed test names from the e2e log's summary; {} when it has none."""
    counts = None
    for match in _COUNTS.finditer(log):
        counts = match  # the last summary is the run's
    if counts is None:
        return {}
    failed: list[str] = []
    in_summary = False
    for line in log.splitlines():
        if line.startswith("Summarizing ") and "Failure" in line:
            in_summary, failed = True, []
            continue
        found = _FAILURE.match(line) if in_summary else None
        if found:
            # Ginkgo marks the failing node ("[It]"); the test's name is the rest.
            name = re.sub(r"\s*\[It\]\s*", " ", found.group(1)).strip()
            if name not in failed:
                failed.append(name)
    passed, failures, _, skipped = (int(g) for g in counts.groups())
    return {"passed": passed, "failed": failures, "skipped": skipped, "failedTests": failed}


def _decide(ctx: registry.StepContext, results: dict[str, Any]) -> tuple[bool, str]:
    allowlist = ctx.params.get("flakyAllowlist") or []
    flaky = [t for t in results["failedTests"] if any(a in t for a in allowlist)]
    counted_failures = max(0, results["failed"] - len(flaky))
    counted = results["passed"] + counted_failures
    rate = 100.0 if counted == 0 else 100.0 * results["passed"] / counted
    results["flakyFailures"] = flaky
    results["passPercent"] = round(rate, 2)
    threshold = float(ctx.params["passThreshold"])
    if results["passed"] == 0:
        return False, "conformance: no test passed"
    if rate >= threshold:
        return True, ""
    names = [t for t in results["failedTests"] if t not in flaky]
    message = (
        f"conformance: {counted_failures} of {counted} tests failed "
        f"({results['passPercent']:g}% passed, {threshold:g}% needed)"
    )
    return False, message + (": " + "; ".join(names) if names else "")


def _read_junit(ctx: registry.StepContext, api: k8s.ApiClient) -> tuple[dict[str, Any], Any]:
    """What the output says of the JUnit file, and the results read from it (None: unusable).

    The file is kept with the run as soon as it is out of the log, also when it then
    fails to parse: a platform engineer may want to look at it.
    """
    ns = _names(ctx)["namespace"]
    log = pods.log(
        api,
        ns,
        POD,
        container=RESULTS,
        limit_bytes=junit.LOG_LIMIT_BYTES,
        what=f"log of Pod {ns}/{POD} container {RESULTS}",
    )
    info: dict[str, Any] = {}
    try:
        content = junit.extract(str(log or ""))
        if content is None:
            return {"junitError": "the runner wrote no JUnit file"}, None
        artifacts.artifact_store(
            run_id=ctx.run_id,
            step_name=ctx.step_name,
            name=junit.FILE,
            content=content,
            content_type="application/xml",
        )
        info["junitFile"] = junit.FILE
        return info, junit.parse(content)
    except junit.JUnitError as exc:
        return {**info, "junitError": str(exc)}, None


def _runner(pod: objects.JSON) -> objects.JSON:
    """The runner container's `state.terminated`, or {} while it has not ended."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == RUNNER:
            terminated: objects.JSON = (status.get("state") or {}).get("terminated") or {}
            return terminated
    return {}


def _finish(ctx: registry.StepContext, api: k8s.ApiClient, phase: str) -> None:
    """Read the results of the ended runner into memo["result"]."""
    ns = _names(ctx)["namespace"]
    log = pods.log(
        api, ns, POD, container=RUNNER, tail_lines=LOG_LINES, what=f"log of Pod {ns}/{POD}"
    )
    info, results = _read_junit(ctx, api)
    source = "junit"
    if results is None:
        results, source = parse_results(log or ""), "e2e log"
    output: dict[str, Any] = {
        "image": ctx.memo["image"],
        "phase": phase,
        **_run_output(ctx.params),
        **info,
    }
    excerpt = objects.tail(log or "", EXCERPT_CHARS)
    if not results:
        ctx.memo["result"] = {
            "ok": False,
            "message": f"conformance Pod {ns}/{POD} ended {phase} without a summary",
            "output": {**output, "log": excerpt},
        }
        return
    ok, message = _decide(ctx, results)
    ctx.memo["result"] = {
        "ok": ok,
        "message": message,
        "output": {**output, "resultsFrom": source, **results, "log": excerpt},
    }


def _observe(ctx: registry.StepContext, api: k8s.ApiClient) -> registry.Poll | None:
    """A Poll while the tests run; else None, with the outcome in memo["result"]."""
    ns = _names(ctx)["namespace"]
    pod = objects.get(api, objects.path("v1", "pods", ns, POD), what=f"Pod {ns}/{POD}")
    if pod is None:
        ctx.memo["result"] = {"ok": False, "message": f"conformance Pod {ns}/{POD} was deleted"}
        return None
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    if phase in ("Succeeded", "Failed"):
        _finish(ctx, api, phase)
        return None
    runner = _runner(pod)
    if runner:
        # The runner ended but the Pod has not: the results container is still printing,
        # or waits for a `done` marker a crashed runner never wrote.
        waits = int(ctx.memo.get("resultsWaits", 0))
        if waits < RESULTS_WAIT_POLLS:
            ctx.memo["resultsWaits"] = waits + 1
            return registry.Poll(
                after=ctx.params["pollSeconds"],
                message="conformance tests ended; waiting for their results",
            )
        _finish(ctx, api, "Succeeded" if runner.get("exitCode") == 0 else "Failed")
        return None
    # Hydrophone bounds its Pod's start as a whole (pkg/common/pod.go `CreatePod`, 5 min):
    # a Pod Pending for no reason `pods.trouble` names is stuck after the grace too.
    found = pods.trouble(pod) or pods.not_started(pod)
    running = {"image": ctx.memo["image"], **_run_output(ctx.params)}
    if not pods.stuck(ctx.memo, found, ctx.params["stuckGraceSeconds"]) or found is None:
        message = f"conformance Pod is {phase}"
        named = found is not None and found.reason != pods.PENDING
        return registry.Poll(
            after=ctx.params["pollSeconds"],
            message=f"{message}: {found.describe()}" if found and named else message,
            output=running,
        )
    ctx.memo["result"] = {
        "ok": False,
        "message": f"conformance Pod {ns}/{POD}: {found.describe()}",
        "output": {**running, "phase": phase, "stuck": found.output()},
    }
    return None


def _start(ctx: registry.StepContext, api: k8s.ApiClient) -> registry.Poll | None:
    """Create what the tests need; memo["image"] once the Pod exists."""
    image = ctx.params.get("image") or f"{ctx.params['registry']}/conformance:{_version(ctx)}"
    results_image = ctx.params.get("resultsImage") or f"{ctx.params['registry']}/{RESULTS_IMAGE}"
    refused = _create(ctx, api, image, results_image)
    if refused is None:
        ctx.memo["image"] = image
        return None
    return _refused(ctx, refused, image)


def _refused(ctx: registry.StepContext, found: pods.Trouble, image: str) -> registry.Poll | None:
    """A Poll while the API server refuses the Pod within the grace; else None, with the
    failure in memo["result"]."""
    output = {"image": image, **_run_output(ctx.params)}
    if not pods.stuck(ctx.memo, found, ctx.params["stuckGraceSeconds"]):
        return registry.Poll(
            after=ctx.params["pollSeconds"],
            message=f"conformance Pod is not created yet: {found.describe()}",
            output=output,
        )
    ns = _names(ctx)["namespace"]
    ctx.memo["result"] = {
        "ok": False,
        "message": f"conformance Pod {ns}/{POD}: {found.describe()}",
        "output": {**output, "stuck": found.output()},
    }
    return None


@registry.step_type(
    "conformance",
    params=PARAMS,
    cleanup=cleanup,
    default_timeout_seconds=DEFAULT_TIMEOUT_SECONDS,
    # The Pod reports "Running" for the whole run of the tests (an hour or more).
    stall_seconds=5400,
)
def conformance(ctx: registry.StepContext) -> registry.Outcome:
    """Runs the Kubernetes conformance tests in the workload cluster."""
    api = objects.workload(ctx)
    if "result" not in ctx.memo:
        waiting = None if ctx.memo.get("image") else _start(ctx, api)
        if waiting is None and "result" not in ctx.memo:
            waiting = _observe(ctx, api)
        if waiting is not None:
            return waiting
    # The outcome is kept before the cleanup: if deleting fails, the retry only deletes.
    _delete(ctx, api)
    result = ctx.memo["result"]
    if result["ok"]:
        return registry.Done(result["output"])
    raise errors.PermanentError(result["message"], output=result.get("output"))
