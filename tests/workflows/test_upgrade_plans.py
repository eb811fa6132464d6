"""Upgrade policies and the GenerateUpgradePlan answers.

Covers: every plan a policy gives passes Cluster API's own check of an answer
(tests/support/capi_upgrade.py, a transcription of DefaultAndValidateUpgradePlans in
kubernetes-sigs/cluster-api exp/topology/desiredstate/upgrade_plan.go: one version per minor
from the control plane's to the target, increasing, ending at the target; workers among the
control plane's versions, increasing, within the skew, ending at the target), a Hypothesis
property over random policies and clusters; that a refusal says why; pins, skips and the
workers strategies; the hook's answers, and the selection of the one policy.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hooksvc.contract import semver
from tests.support import capi, capi_upgrade
from tests.support import capi_machines as cm
from workflows.definitions import apply, policies, spec
from workflows.hookpath import upgradeplan

POLICY = """
apiVersion: hooks.hooksvc.io/v1alpha1
kind: UpgradePolicy
metadata: {name: fleet-upgrades}
spec:
  clusterSelector: {matchLabels: {inplace: "true"}}
  versions: [v1.30.14, v1.31.0, v1.31.9, v1.31.12, v1.32.4, v1.32.9, v1.33.0]
  pins: {v1.31: v1.31.9}
  skip: [v1.32.9]
  workers: %s
"""


@pytest.fixture(autouse=True)
def _policies_read_afresh() -> None:
    """Each test's database is its own: the process' cache of policies must not carry over."""
    policies.forget()


def _policy(workers: str = "Minimal", **changes: Any) -> policies.UpgradePolicy:
    body = spec.parse(POLICY % workers)[0].spec
    return policies.typed_upgrade("fleet-upgrades", {**body, **changes})


def test_the_policy_pins_a_patch_per_minor_and_skips_a_bad_one() -> None:
    plan = upgradeplan.plan(_policy(), control_plane="v1.30.2", workers="v1.30.2", target="v1.33.0")
    assert plan.control_plane == ("v1.31.9", "v1.32.4", "v1.33.0")
    assert plan.workers == ("v1.33.0",), "Minimal: within the skew, straight to the target"
    capi_upgrade.default_and_validate(
        "v1.33.0", "v1.30.2", "v1.30.2", plan.control_plane, plan.workers
    )


def test_every_minor_workers_follow_each_control_plane_step() -> None:
    plan = upgradeplan.plan(
        _policy("EveryMinor"), control_plane="v1.30.2", workers="v1.29.8", target="v1.33.0"
    )
    assert plan.workers == ("v1.30.2", "v1.31.9", "v1.32.4", "v1.33.0")
    capi_upgrade.default_and_validate(
        "v1.33.0", "v1.30.2", "v1.29.8", plan.control_plane, plan.workers
    )


def test_without_workers_the_workers_plan_is_empty() -> None:
    plan = upgradeplan.plan(
        _policy("EveryMinor"), control_plane="v1.30.2", workers="", target="v1.32.4"
    )
    assert (plan.control_plane, plan.workers) == (("v1.31.9", "v1.32.4"), ())


@pytest.mark.parametrize(
    ("changes", "control_plane", "target", "message"),
    [
        (
            {},
            "v1.30.2",
            "v1.34.0",
            "v1.34.0 is not among the versions upgrade policy fleet-upgrades allows",
        ),
        ({}, "v1.30.2", "v1.32.9", "upgrade policy fleet-upgrades skips v1.32.9"),
        (
            {"versions": ["v1.30.14", "v1.33.0"], "pins": {}},
            "v1.30.2",
            "v1.33.0",
            "upgrade policy fleet-upgrades allows no version of v1.31, which the upgrade from"
            " v1.30.2 to v1.33.0 must go through",
        ),
        (
            {},
            "v1.33.0",
            "v1.31.9",
            "v1.31.9 is older than the control plane's v1.33.0; an upgrade plan only goes forward",
        ),
    ],
)
def test_a_target_the_policy_cannot_reach_is_refused_saying_why(
    changes: dict[str, Any], control_plane: str, target: str, message: str
) -> None:
    with pytest.raises(upgradeplan.PlanError) as caught:
        upgradeplan.plan(_policy(**changes), control_plane=control_plane, workers="", target=target)
    assert str(caught.value) == message


_MINORS = st.integers(26, 34)


@st.composite
def _cases(draw: st.DrawFn) -> tuple[policies.UpgradePolicy, str, str, str]:
    versions = sorted(
        {
            f"v1.{m}.{p}"
            for m, p in draw(
                st.lists(st.tuples(_MINORS, st.integers(0, 12)), min_size=1, max_size=25)
            )
        },
        key=lambda v: (semver.parse(v).minor, semver.parse(v).patch),
    )
    skip = draw(st.lists(st.sampled_from(versions), max_size=3, unique=True))
    allowed = [v for v in versions if v not in skip]
    pins: dict[str, str] = {}
    for v in draw(st.lists(st.sampled_from(allowed), max_size=3)) if allowed else []:
        parsed = semver.parse(v)
        pins[f"v1.{parsed.minor}"] = v
    target = draw(st.sampled_from(versions))
    control_plane = f"v1.{draw(_MINORS)}.{draw(st.integers(0, 12))}"
    cp_minor = semver.parse(control_plane).minor
    workers = draw(
        st.one_of(
            st.just(""), st.integers(max(0, cp_minor - 4), cp_minor).map(lambda m: f"v1.{m}.1")
        )
    )
    policy = policies.UpgradePolicy(
        name="p",
        selector=policies.LabelSelector(),
        namespaces=(),
        cluster_class="",
        versions=tuple(versions),
        pins=pins,
        skip=tuple(skip),
        workers=draw(st.sampled_from(policies.WORKERS)),
    )
    return policy, control_plane, workers, target


@settings(max_examples=400, deadline=None)
@given(case=_cases())
def test_every_plan_passes_capis_check_and_every_refusal_says_why(
    case: tuple[policies.UpgradePolicy, str, str, str],
) -> None:
    policy, control_plane, workers, target = case
    # CAPI calls only when something is to upgrade, with workers no newer than the control plane.
    assume(control_plane != target or (workers and workers != target))
    assume(not workers or semver.compare(semver.parse(workers), semver.parse(control_plane)) <= 0)
    try:
        plan = upgradeplan.plan(policy, control_plane=control_plane, workers=workers, target=target)
    except upgradeplan.PlanError as exc:
        assert str(exc), "a refusal says why"
        return
    checked = capi_upgrade.default_and_validate(
        target, control_plane, workers, plan.control_plane, plan.workers
    )
    assert list(plan.workers) == checked, "the workers plan is the one CAPI keeps"
    for version in plan.control_plane:
        assert version in policy.versions and version not in policy.skip
        pinned = policy.pins.get(f"v1.{semver.parse(version).minor}")
        assert pinned in (None, version) or version == target


def _hook_request(
    labels: dict[str, str], from_cp: str, to: str, from_workers: str | None = None
) -> dict[str, Any]:
    cluster = capi.cluster_v1beta2(labels=labels, version=to)
    return cm.generate_upgrade_plan(from_cp, to, from_workers, cluster=cluster)


def _post(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(
        capi.hook_path("GenerateUpgradePlan"), json.dumps(body), content_type="application/json"
    )
    answer: dict[str, Any] = response.json()
    return answer


@pytest.mark.django_db
@override_settings(OPTIONAL_HOOKS="UpgradePlan", HOOK_CALL_FLUSH_SECONDS=0)
def test_the_hook_answers_the_policys_plan(client: Client) -> None:
    apply.templates_apply(documents=spec.parse(POLICY % "EveryMinor"))
    answer = _post(client, _hook_request({"inplace": "true"}, "v1.30.2", "v1.33.0", "v1.30.2"))
    assert answer == {
        "apiVersion": capi.API_VERSION,
        "kind": "GenerateUpgradePlanResponse",
        "status": "Success",
        "controlPlaneUpgrades": [{"version": v} for v in ("v1.31.9", "v1.32.4", "v1.33.0")],
        "workersUpgrades": [{"version": v} for v in ("v1.31.9", "v1.32.4", "v1.33.0")],
    }


@pytest.mark.django_db
@override_settings(OPTIONAL_HOOKS="UpgradePlan", HOOK_CALL_FLUSH_SECONDS=0)
def test_the_hook_refuses_with_a_clear_message(client: Client) -> None:
    apply.templates_apply(documents=spec.parse(POLICY % "Minimal"))
    unmatched = _post(client, _hook_request({}, "v1.30.2", "v1.33.0"))
    assert (unmatched["status"], unmatched["message"]) == (
        "Failure",
        "no upgrade policy matches cluster fleet/prod-eu-1",
    )
    too_far = _post(client, _hook_request({"inplace": "true"}, "v1.30.2", "v1.34.0"))
    assert (
        too_far["message"]
        == "v1.34.0 is not among the versions upgrade policy fleet-upgrades allows"
    )
    assert "controlPlaneUpgrades" not in too_far


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("versions: []", "spec.versions: must list at least one version"),
        ("versions: [latest]", "spec.versions[0]: 'latest' is not a version"),
        (
            "versions: [v1.31.0]\n  pins: {v1.31: v1.32.0}",
            "spec.pins.v1.31: v1.32.0 is not a version of minor v1.31",
        ),
        (
            "versions: [v1.31.0]\n  pins: {v1.31: v1.31.2}",
            "spec.pins.v1.31: v1.31.2 is not among spec.versions",
        ),
        (
            "versions: [v1.31.0]\n  workers: Sometimes",
            "spec.workers: must be one of Minimal, EveryMinor",
        ),
    ],
)
def test_a_bad_upgrade_policy_is_refused_naming_the_field(body: str, message: str) -> None:
    head = "apiVersion: hooksvc/v1alpha1\nkind: UpgradePolicy\nmetadata: {name: p}\n"
    text = f"{head}spec:\n  {body}\n"
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(text)
    assert message in str(caught.value)


def _preview(tmp_path: Path, labels: dict[str, str], target: str) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(capi.cluster_v1beta2(labels=labels, version="v1.30.2")))
    out = io.StringIO()
    call_command("workflows", "preview", "--cluster", str(path), "--upgrade-to", target, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_preview_upgrade_to_shows_the_plan_the_hook_answers(tmp_path: Path) -> None:
    apply.templates_apply(documents=spec.parse(POLICY % "EveryMinor"))
    text = _preview(tmp_path, {"inplace": "true"}, "v1.33.0")
    assert (
        "plan of upgrade policy fleet-upgrades (GenerateUpgradePlan): control plane "
        "v1.31.9, v1.32.4, v1.33.0; workers v1.31.9, v1.32.4, v1.33.0"
    ) in text
    assert "BeforeControlPlaneUpgrade v1.31.9->v1.32.4" in text


@pytest.mark.django_db
def test_preview_upgrade_to_says_why_the_hook_would_refuse(tmp_path: Path) -> None:
    apply.templates_apply(documents=spec.parse(POLICY % "Minimal"))
    with pytest.raises(CommandError) as caught:
        _preview(tmp_path, {"inplace": "true"}, "v1.34.0")
    assert str(caught.value) == (
        "GenerateUpgradePlan would answer Failure: v1.34.0 is not among the versions upgrade"
        " policy fleet-upgrades allows"
    )
