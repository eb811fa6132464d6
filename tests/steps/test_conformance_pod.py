"""`conformance`'s Pod: how it tells go-runner to run the tests, and what becomes of it.

Against the emulator's kube-scheduler and kubelet (tests/support/kube_workloads.py):
`parallelism` and `serialTests` as go-runner reads them, the image tag of a version with
build metadata, both containers within PodSecurity `restricted`, Hydrophone's tolerations
(and narrower ones), and a Pod that cannot start (an image that cannot be pulled, no Node
it tolerates) failing the step after `stuckGraceSeconds` with the reason, not after the
two-hour timeout. The grace is measured on workflows.clock, which the tests hold.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from tests.steps.conftest import Context, at_epoch, run
from tests.steps.test_conformance import NAME, RESTRICTED, conf, namespace_goes
from tests.support import kube_workloads, pod_security
from tests.support.kube import KubeEmulator
from tests.support.kube_workloads import Workloads, node
from workflows import errors
from workflows.steps import registry

PODS = ("", "v1", "pods")
POD = "e2e-conformance"
IMAGE = "registry.k8s.io/conformance:v1.33.0"
SERIAL_SPEC = "[sig-apps] Daemon set [Serial] should rollback without unnecessary restarts"
CONTROL_PLANE = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


def ginkgo_args(env: dict[str, str]) -> list[str]:
    """What go-runner hands ginkgo for this environment, as its getCmd builds the arguments
    (kubernetes test/conformance/image/go-runner/cmd.go; defaults from const.go: E2E_PARALLEL
    "1", E2E_SKIP ""): `--p`, and `[Serial]` skipped when E2E_SKIP is empty, only for
    E2E_PARALLEL y, Y or true; E2E_EXTRA_GINKGO_ARGS split on spaces."""
    args: list[str] = []
    skip = env.get("E2E_SKIP", "")
    if (env.get("E2E_PARALLEL") or "1") in ("y", "Y", "true"):
        args.append("--p")
        skip = skip or r"\[Serial\]"
    args += [f"--focus={env.get('E2E_FOCUS', '')}", f"--skip={skip}", "--noColor=true"]
    if env.get("E2E_EXTRA_GINKGO_ARGS"):
        args += env["E2E_EXTRA_GINKGO_ARGS"].split(" ")
    return args


def pod_env(kube: KubeEmulator) -> dict[str, str]:
    pod = kube.get_object(*PODS, NAME, POD)
    assert pod is not None
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, (None, "", "run")),
        ({"parallelism": 4}, ("--procs=4", "", "run one at a time after the others")),
        ({"parallelism": 4, "serialTests": "skip"}, ("--procs=4", r"\[Serial\]", "skipped")),
        ({"skip": "Slow", "serialTests": "skip"}, (None, r"Slow|\[Serial\]", "skipped")),
        (
            {"skip": "Slow", "parallelism": 2},
            ("--procs=2", "Slow", "run one at a time after the others"),
        ),
    ],
    ids=["serial", "parallel", "parallel-skip-serial", "serial-skip-serial", "parallel-own-skip"],
)
def test_parallelism_and_serial_tests_reach_ginkgo_as_the_template_says(
    kube: KubeEmulator,
    context: Context,
    params: dict[str, Any],
    expected: tuple[str | None, str, str],
) -> None:
    """go-runner runs ginkgo in parallel only for E2E_PARALLEL y/true, and then skips
    `[Serial]` itself when E2E_SKIP is empty (go-runner cmd.go); any other value (hooksvc sent
    "4") is serial. Hydrophone passes `--procs=N` in E2E_EXTRA_GINKGO_ARGS
    (kubernetes-sigs/hydrophone pkg/conformance/deploy.go). So the step sets no E2E_PARALLEL,
    passes `--procs`, and only `serialTests: skip` skips `[Serial]`; the output says which."""
    procs, skip, serial = expected
    first = run(conf(context, **params))
    env = pod_env(kube)
    assert "E2E_PARALLEL" not in env
    args = ginkgo_args(env)
    assert "--p" not in args
    assert [a for a in args if a.startswith("--procs")] == ([procs] if procs else [])
    assert f"--skip={skip}" in args
    skips_serial = bool(skip) and re.search(skip, SERIAL_SPEC) is not None
    assert skips_serial is (serial == "skipped")
    assert isinstance(first, registry.Poll) and first.output is not None
    assert (first.output["parallelism"], first.output["serialTests"]) == (
        params.get("parallelism", 1),
        serial,
    )


@pytest.mark.parametrize(
    ("version", "tag"),
    [
        ("v1.30.2+k3s1", "v1.30.2"),
        ("1.31.4+rke2r1", "v1.31.4"),
        ("v1.32.0-rc.1+abc", "v1.32.0"),
        ("v1.33.2-eks-931bdca", "v1.33.2"),
    ],
)
def test_the_image_tag_is_the_versions_major_minor_and_patch_as_hydrophone_takes_it(
    kube: KubeEmulator, context: Context, version: str, tag: str
) -> None:
    """An image tag is `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}` (OCI distribution spec, tag
    grammar): `+` cannot appear, and registry.k8s.io publishes conformance:vX.Y.Z. Hydrophone
    runs `conformance:v` + the server version's semver FinalizeVersion (major.minor.patch:
    no pre-release, no build metadata; kubernetes-sigs/hydrophone e96b8e9 cmd/root.go
    `normalizeVersion`), so a distribution's `-eks-...` is dropped too (it asked for
    conformance:v1.33.2-eks-931bdca, which no registry has)."""
    run(
        context(
            "conformance", {"version": version}, hook="AfterClusterUpgrade", step_name="conformance"
        )
    )
    pod = kube.get_object(*PODS, NAME, POD)
    assert pod is not None
    image = pod["spec"]["containers"][0]["image"]
    assert image == f"registry.k8s.io/conformance:{tag}"
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", image.rsplit(":", 1)[1])


def test_both_containers_pass_pod_security_restricted(kube: KubeEmulator, context: Context) -> None:
    """The Pod Security Standards' Restricted profile
    (https://kubernetes.io/docs/concepts/security/pod-security-standards/, as PodSecurity
    admission checks it): non-root, all capabilities dropped, RuntimeDefault seccomp, no
    privilege escalation, only core volume types; the securityContext is Hydrophone's."""
    run(conf(context))
    pod = kube.get_object(*PODS, NAME, POD)
    assert pod is not None
    assert pod_security.violations(pod) == []
    assert [c["securityContext"] for c in pod["spec"]["containers"]] == [RESTRICTED, RESTRICTED]
    # What the step sent before: the same Pod without securityContexts is refused on each count.
    bare = copy.deepcopy(pod)
    for container in bare["spec"]["containers"]:
        del container["securityContext"]
    refused = pod_security.violations(bare)
    for index in (0, 1):
        for field in (
            "allowPrivilegeEscalation",
            "capabilities.drop",
            "runAsNonRoot",
            "seccompProfile",
        ):
            assert any(
                v.startswith(f"spec.containers[{index}].securityContext.{field}") for v in refused
            )


def test_it_tolerates_every_taint_as_hydrophone_does(kube: KubeEmulator, context: Context) -> None:
    """Hydrophone's Pod tolerates everything (`operator: Exists`, pkg/conformance/deploy.go),
    so it runs on a cluster whose only Nodes carry the control-plane taint."""
    work = kube_workloads.start(kube, nodes=[node("cp-1", [CONTROL_PLANE])])
    first = run(conf(context))
    assert isinstance(first, registry.Poll)
    work.wait("the Pod to run", lambda: work.pod(NAME, POD)["status"]["phase"] == "Running")
    assert work.pod(NAME, POD)["spec"]["nodeName"] == "cp-1"
    assert run(conf(context)) == registry.Poll(
        after=30,
        message="conformance Pod is Running",
        output={"image": IMAGE, "parallelism": 1, "serialTests": "run"},
    )


def at(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    at_epoch(monkeypatch, 1_000_000.0 + seconds)


def test_a_pod_no_node_tolerates_fails_after_the_grace_with_the_reason(
    kube: KubeEmulator, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube-scheduler marks a Pod it cannot place PodScheduled False, reason Unschedulable
    (taint-and-toleration page); with narrower tolerations the Pod fits no control-plane
    Node. The step waits `stuckGraceSeconds`, then fails naming the reason and cleans up."""
    work = kube_workloads.start(kube, nodes=[node("cp-1", [CONTROL_PLANE])])
    only = [
        {"key": "dedicated", "operator": "Equal", "value": "conformance", "effect": "NoSchedule"}
    ]
    ctx = conf(context, tolerations=only, stuckGraceSeconds=120)
    at(monkeypatch, 0)
    run(ctx)
    work.wait("the scheduler", lambda: work.pod(NAME, POD)["status"]["conditions"])
    assert work.pod(NAME, POD)["spec"]["tolerations"] == only
    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert (
        waiting.message == "conformance Pod is Pending: the Pod cannot be scheduled (Unschedulable)"
    )
    at(monkeypatch, 119)
    assert isinstance(run(ctx), registry.Poll)
    at(monkeypatch, 120)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert (
        exc.value.message
        == f"conformance Pod {NAME}/{POD}: the Pod cannot be scheduled (Unschedulable)"
    )
    assert exc.value.output is not None
    assert exc.value.output["stuck"]["reason"] == "Unschedulable"
    assert exc.value.output["stuck"]["detail"].startswith(
        "0/1 nodes are available: 1 node(s) had untolerated taint"
    )
    namespace_goes(kube)
    assert (
        kube.get_object("rbac.authorization.k8s.io", "v1", "clusterrolebindings", None, NAME)
        is None
    )


def test_an_image_that_cannot_be_pulled_fails_after_the_grace_not_the_timeout(
    kube: KubeEmulator, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet reports a container whose image cannot be pulled as waiting with
    ErrImagePull, then ImagePullBackOff between pulls (kubernetes
    pkg/kubelet/images/image_manager.go); Hydrophone aborts on these
    (pkg/common/pod.go). The step fails after the default 300 s, not the 2 h timeout."""
    work = kube_workloads.start(kube, time_scale=1.0)  # ImagePullBackOff for 9 s at a time
    work.unpullable(IMAGE)
    ctx = conf(context)
    at(monkeypatch, 0)
    run(ctx)
    work.wait(
        "the back-off", lambda: work.waiting_reason(NAME, POD, "conformance") == "ImagePullBackOff"
    )
    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll)
    assert waiting.message == (
        "conformance Pod is Pending: container conformance cannot pull its image (ImagePullBackOff)"
    )
    at(monkeypatch, 299)
    assert isinstance(run(ctx), registry.Poll)
    at(monkeypatch, 300)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == (
        f"conformance Pod {NAME}/{POD}: container conformance cannot pull its image"
        " (ImagePullBackOff)"
    )
    assert exc.value.output is not None
    assert exc.value.output["stuck"] == {
        "container": "conformance",
        "reason": "ImagePullBackOff",
        "detail": f'Back-off pulling image "{IMAGE}"',
    }
    namespace_goes(kube, wait=False)


def test_a_pod_pending_for_no_named_reason_fails_after_the_grace_as_hydrophones_start_timeout(
    kube: KubeEmulator, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hydrophone waits `--startup-timeout` (5 min) for its Pod to leave Pending, whatever
    keeps it there (kubernetes-sigs/hydrophone e96b8e9 pkg/common/pod.go `CreatePod`,
    pkg/types/config.go `StartupTimeout`). Here no kubelet ever starts the Pod (a sandbox
    or a volume that never comes): it polled for the two-hour timeout; now it fails after
    `stuckGraceSeconds`, saying the Pod has not started, while the wait says only that it
    is Pending."""
    ctx = conf(context)
    at(monkeypatch, 0)
    first = run(ctx)
    assert isinstance(first, registry.Poll) and first.message == "conformance Pod is Pending"
    at(monkeypatch, 299)
    waiting = run(ctx)
    assert isinstance(waiting, registry.Poll) and waiting.message == "conformance Pod is Pending"
    at(monkeypatch, 300)
    with pytest.raises(errors.PermanentError) as exc:
        run(ctx)
    assert exc.value.message == f"conformance Pod {NAME}/{POD}: the Pod has not started (Pending)"
    assert exc.value.output is not None
    assert exc.value.output["stuck"] == {"reason": "Pending", "detail": ""}
    namespace_goes(kube)


def test_trouble_that_clears_within_the_grace_is_forgotten(
    kube: KubeEmulator, workloads: Workloads, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry that was down only briefly: once the kubelet pulls the image, the Pod runs
    and the grace starts again from nothing the next time."""
    workloads.unpullable(IMAGE)
    ctx = conf(context, stuckGraceSeconds=60)
    at(monkeypatch, 0)
    run(ctx)
    workloads.wait("a failed pull", lambda: workloads.waiting_reason(NAME, POD, "conformance"))
    assert isinstance(run(ctx), registry.Poll)
    assert "troubleSince" in ctx.memo
    workloads.unpullable(IMAGE, refused=False)
    workloads.wait(
        "the Pod to run", lambda: workloads.pod(NAME, POD)["status"]["phase"] == "Running"
    )
    at(monkeypatch, 59)
    assert run(ctx) == registry.Poll(
        after=30,
        message="conformance Pod is Running",
        output={"image": IMAGE, "parallelism": 1, "serialTests": "run"},
    )
    assert "troubleSince" not in ctx.memo


@pytest.mark.parametrize(
    ("tolerations", "error"),
    [
        (
            [{"operator": "Exists", "value": "x"}],
            "tolerations.0.operator: value must be empty when `operator` is 'Exists'",
        ),
        (
            [{"operator": "Equal", "value": "x"}],
            "tolerations.0.operator: operator must be Exists when `key` is empty, which means"
            ' "match all values and all keys"',
        ),
        (
            [{"key": "", "value": "x"}],
            "tolerations.0.operator: operator must be Exists when `key` is empty, which means"
            ' "match all values and all keys"',
        ),
        (
            [{"key": "k", "operator": "Exists", "tolerationSeconds": 30}],
            "tolerations.0.effect: effect must be 'NoExecute' when `tolerationSeconds` is set",
        ),
        (
            [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 3}],
            "tolerations.0.effect: effect must be 'NoExecute' when `tolerationSeconds` is set",
        ),
        (
            [{"key": "k", "operator": "Maybe"}],
            'tolerations.0.operator: Unsupported value: "Maybe": supported values: "Equal",'
            ' "Exists"',
        ),
        (
            [{"key": "k", "operator": "Exists", "effect": "Sometimes"}],
            'tolerations.0.effect: Unsupported value: "Sometimes": supported values:'
            ' "NoSchedule", "PreferNoSchedule", "NoExecute"',
        ),
        (
            [{"key": "bad key", "operator": "Exists"}],
            "tolerations.0.key: must be a qualified name: at most 63 alphanumeric characters,"
            " '-', '_' or '.', starting and ending with an alphanumeric one, with an optional"
            " DNS subdomain prefix and '/'",
        ),
        (
            [{"key": "k", "value": "two words"}],
            "tolerations.0.operator: a valid label value must be an empty string or at most 63"
            " alphanumeric characters, '-', '_' or '.', starting and ending with an"
            " alphanumeric one",
        ),
        (
            [{"operator": "Exists"}, {"key": "k", "operator": "Exists", "tolerationSeconds": "5"}],
            "tolerations.1.tolerationSeconds: must be an integer",
        ),
        (["all"], "tolerations.0: must be an object"),
        ([{"operator": "Exists", "seconds": 3}], "tolerations.0.seconds: unknown field"),
    ],
)
def test_bad_tolerations_are_refused_at_apply(tolerations: list[Any], error: str) -> None:
    """kube-apiserver refuses these with 422 when the Pod is created (kubernetes v1.33
    pkg/apis/core/validation/validation.go, `ValidateTolerations`, `validateTaintEffect`;
    apimachinery `IsQualifiedName`, `IsValidLabelValue`): `Exists` with a value, an empty key
    without `Exists`, `tolerationSeconds` without `NoExecute`, an unknown operator or
    effect, a key or value that is no label key or value. The template is refused when it is
    applied, with the field and the API server's words, before any object is made."""
    with pytest.raises(registry.ParamError) as exc:
        registry.validate("conformance", {"tolerations": tolerations}, hook="AfterClusterUpgrade")
    assert str(exc.value) == error


@pytest.mark.parametrize(
    "tolerations",
    [
        [{"operator": "Exists"}],
        [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}],
        [{"key": "dedicated", "value": "conformance", "effect": "NoSchedule"}],
        [{"key": "example.com/gpu", "operator": "Equal", "value": "", "effect": "NoSchedule"}],
        [
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
        [{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}],
    ],
)
def test_good_tolerations_are_accepted(tolerations: list[Any]) -> None:
    """What ValidateTolerations accepts (same source): including Kubernetes' own defaults
    (the not-ready/unreachable NoExecute tolerations with tolerationSeconds 300)."""
    params = registry.validate(
        "conformance", {"tolerations": tolerations}, hook="AfterClusterUpgrade"
    )
    assert params["tolerations"] == tolerations
