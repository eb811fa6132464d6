"""Versions an operator types, judged as Cluster API's Cluster webhook judges a change of
`spec.topology.version`: `workflows preview --upgrade-to` refuses a downgrade, a version
without "v" and one that is not a semantic version, with the reason CAPI would give, and
`workflows rollout resume|abandon 1.33.0` names `v1.33.0`.

Upstream (kubernetes-sigs/cluster-api ae7ff04): `core/webhooks/admission/cluster.go`
`validateTopology` refuses a version without the "v" prefix ("must start with v") or whose
rest blang/semver's strict `Parse` refuses ("version must be a valid semantic version": a
patch is required, so `v1.33` is refused); `validateTopologyVersionUpdate` refuses a
decrease ("version cannot be decreased from %q to %q"), comparing with `util/version`
`Compare(..., WithoutPreReleases())`, and does nothing when the version is unchanged.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from hooksvc.contract import versions
from tests.support import capi
from workflows.rollout_actions import RolloutAction

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "version", ["v1.33.0", "v1.33.0-rc.1", "v1.33.0+rke2r1", "v1.30.10", "v0.0.0"]
)
def test_versions_capi_accepts(version: str) -> None:
    assert versions.problem(version) == ""


@pytest.mark.parametrize(
    ("version", "said"),
    [
        ("1.33.0", "'1.33.0' must start with v, as Cluster API requires: did you mean v1.33.0?"),
        ("1.33", "'1.33' is not a version Cluster API accepts: it needs v and a patch (e.g. v1."),
        ("v1.33", "'v1.33' is not a version Cluster API accepts: it needs a patch (e.g. v1.33.0)"),
        ("v1.033.0", "'v1.033.0' is not a version Cluster API accepts (vMAJOR.MINOR.PATCH"),
        ("latest", "'latest' must start with v, as Cluster API requires (e.g. v1.33.0)"),
        ("V1.33.0", "'V1.33.0' must start with v"),
        ("", "'' must start with v"),
    ],
)  # fmt: skip
def test_versions_capi_refuses_say_why_and_what_was_meant(version: str, said: str) -> None:
    assert versions.problem(version).startswith(said)


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("v1.32.4", "v1.31.0", "version cannot be decreased from v1.32.4 to v1.31.0"),
        ("v1.32.4", "v1.32.3", "version cannot be decreased from v1.32.4 to v1.32.3"),
        ("v1.32.4", "v1.32.4-rc.1", ""),  # pre-releases are not compared
        ("v1.32.4", "v1.33.0", ""),
        ("v1.32.4", "v1.32.4+rke2r2", ""),  # nor build tags
    ],
)
def test_a_version_may_not_decrease(old: str, new: str, said: str) -> None:
    assert versions.change_problem(old, new).startswith(said)
    assert bool(versions.change_problem(old, new)) == bool(said)


def _cluster(tmp_path: Path, version: str) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(capi.cluster_v1beta2(name="eu-4", version=version)))
    return str(path)


@pytest.mark.parametrize(
    ("at", "target", "error"),
    [
        ("v1.32.4", "v1.31.0", "fleet/eu-4: version cannot be decreased from v1.32.4 to v1.31.0"),
        ("v1.32.4", "1.33", "'1.33' is not a version Cluster API accepts"),
        ("v1.32.4", "1.33.0", "did you mean v1.33.0?"),
        ("v1.33.0", "v1.33.0", "fleet/eu-4 is at v1.33.0 already: no upgrade, no hook call"),
    ],
)
def test_preview_refuses_an_upgrade_capi_would_refuse(
    tmp_path: Path, at: str, target: str, error: str
) -> None:
    cluster = _cluster(tmp_path, at)
    with pytest.raises(CommandError) as refused:
        call_command("workflows", "preview", "--cluster", cluster, "--upgrade-to", target)
    assert error in str(refused.value)


def test_preview_refuses_a_plan_step_without_v(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"did you mean v1\.33\.0"):
        call_command(
            "workflows", "preview", "--cluster", _cluster(tmp_path, "v1.32.4"),
            "--upgrade-to", "v1.33.0", "--control-plane-plan", "1.33.0",
        )  # fmt: skip


def test_preview_of_an_upgrade_capi_accepts_prints_its_plan(tmp_path: Path) -> None:
    out = io.StringIO()
    call_command(
        "workflows", "preview", "--cluster", _cluster(tmp_path, "v1.32.4"),
        "--upgrade-to", "v1.33.0", stdout=out,
    )  # fmt: skip
    assert out.getvalue().startswith("upgrade of fleet/eu-4 from v1.32.4 to v1.33.0:")


@pytest.mark.parametrize("action", ["resume", "abandon"])
def test_a_rollout_version_without_v_names_the_one_meant_and_records_nothing(
    action: str,
) -> None:
    """The gates wait for `v1.33.0`: an abandon of `1.33.0` would have been recorded and
    touched none of them."""
    with pytest.raises(CommandError) as refused:
        call_command(
            "workflows", "rollout", action, "1.33.0", "--reason", "why", "--actor", "ops:ann"
        )
    assert "did you mean v1.33.0?" in str(refused.value)
    assert not RolloutAction.objects.exists()
