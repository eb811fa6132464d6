"""`manage.py workflows preview`: which templates and steps a hook call would start.

It reads a Cluster (v1beta1 or v1beta2, YAML or JSON) and the applied templates, and
writes nothing: no Run row, whatever matches.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command

from tests.support import capi, servers
from tests.support import workflows as wf
from tests.workflows import documents
from tests.workflows.runs import make_run
from workflows.hookpath import answers
from workflows.models import Run
from workflows.operators import bypasses

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def templates(tmp_path: Path) -> None:
    """Three upgrade templates: two match a prod cluster in namespace fleet, one does not."""
    path = tmp_path / "templates.yaml"
    path.write_text(
        documents.dump(
            documents.template("backup-before-upgrade", clusterSelector={"namespaces": ["fleet"]}),
            documents.template("staging-only", clusterSelector={"namespaces": ["staging"]}),
            documents.template(
                "strict-gate",
                clusterSelector={},
                settings={"profile": "strict"},
                steps=[{"name": "gate", "type": "approval"}],
            ),
            documents.template("on-delete", hook="BeforeClusterDelete"),
        )
    )
    call_command("apply_workflows", "-f", str(path), stdout=io.StringIO())


def cluster_file(tmp_path: Path, cluster: dict[str, Any], *, as_json: bool = False) -> str:
    path = tmp_path / ("cluster.json" if as_json else "cluster.yaml")
    path.write_text(json.dumps(cluster) if as_json else yaml.safe_dump(cluster))
    return str(path)


def preview(*args: str) -> str:
    out = io.StringIO()
    call_command("workflows", "preview", *args, stdout=out)
    return out.getvalue()


@pytest.mark.usefixtures("templates")
def test_preview_lists_matching_templates_and_their_steps_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = cluster_file(tmp_path, capi.cluster_v1beta2())
    text = preview("--hook", "BeforeClusterUpgrade", "--cluster", path, "--to", "v1.33.0")
    assert text.splitlines() == [
        "BeforeClusterUpgrade for cluster fleet/prod-eu-1 "
        "(key 6f0c2a4e-2d7b-4c61-9a1e-0f5c1d2e3a4b), moment 'v1.33.0'",
        "workflowtemplate/backup-before-upgrade matches: would start a run",
        "  1. snapshot (wait)",
        "  2. approve (approval)  dependsOn: snapshot",
        "workflowtemplate/staging-only does not match:",
        "  clusterSelector.namespaces is staging; the cluster is in fleet",
        "workflowtemplate/strict-gate does not match:",
        "  settings wants profile=strict; the call carries no profile",
    ]
    assert not Run.objects.exists()


def test_preview_says_which_selector_or_setting_keeps_a_template_out(tmp_path: Path) -> None:
    """Each of clusterSelector's parts and each setting, as the hook path matches them
    (workflows.hookpath.selection): the template's value and the cluster's or call's."""
    wf.template(
        "picky",
        clusterSelector={
            "namespaces": ["prod", "edge"],
            "matchLabels": {"env": "prod", "tier": "gold"},
            "clusterClass": "quick-start",
        },
        settings={"profile": "strict", "region": "eu"},
    )
    cluster = capi.cluster_v1beta2(labels={"env": "staging"}, cluster_class="dev-class")
    path = cluster_file(tmp_path, cluster)
    args = ("--hook", "BeforeClusterUpgrade", "--cluster", path, "--to", "v1.33.0")
    text = preview(*args, "--setting", "region=us")
    assert text.splitlines()[1:] == [
        "workflowtemplate/picky does not match:",
        "  clusterSelector.namespaces is prod, edge; the cluster is in fleet",
        "  clusterSelector.matchLabels wants env=prod; the cluster has env=staging",
        "  clusterSelector.matchLabels wants tier=gold; the cluster has no label tier",
        "  clusterSelector.clusterClass is quick-start; the cluster is of class dev-class",
        "  settings wants profile=strict; the call carries no profile",
        "  settings wants region=eu; the call carries region=us",
        "no template matches: the hook would answer Success at once",
    ]
    result = json.loads(preview(*args, "--setting", "region=us", "-o", "json"))
    assert len(result["templates"][0]["mismatches"]) == 6


@pytest.mark.usefixtures("templates")
def test_settings_select_templates_and_json_gives_the_moment_key(tmp_path: Path) -> None:
    path = cluster_file(tmp_path, capi.cluster_v1beta1(), as_json=True)
    args = ["--hook", "BeforeControlPlaneUpgrade", "--cluster", path, "--to", "v1.31.0"]
    result = json.loads(preview(*args, "--setting", "profile=strict", "-o", "json"))
    assert result["hook"] == "BeforeControlPlaneUpgrade"
    # --from defaults to the version the Cluster runs (spec.topology.version).
    assert result["moment"] == "v1.30.0->v1.31.0"
    assert result["cluster"] == {
        "namespace": "fleet",
        "name": "legacy-1",
        "key": "1a2b3c4d-0000-4000-8000-000000000001",
    }
    assert result["templates"] == []  # no template for this hook
    result = json.loads(
        preview(
            "--hook",
            "BeforeClusterUpgrade",
            "--cluster",
            path,
            "--to",
            "v1.33.0",
            "--setting",
            "profile=strict",
            "-o",
            "json",
        )
    )
    assert [(t["name"], t["matches"]) for t in result["templates"]] == [
        ("backup-before-upgrade", True),
        ("staging-only", False),
        ("strict-gate", True),
    ]
    assert result["templates"][2]["steps"] == [
        {"name": "gate", "type": "approval", "dependsOn": []}
    ]
    assert not Run.objects.exists()


@pytest.mark.usefixtures("templates")
def test_an_existing_run_for_the_moment_is_shown_instead_of_a_new_one(tmp_path: Path) -> None:
    cluster = capi.cluster_v1beta2(uid="")
    run = make_run(template="backup-before-upgrade", cluster="fleet/prod-eu-1")
    Run.objects.filter(pk=run.pk).update(cluster_key="fleet/prod-eu-1")
    path = cluster_file(tmp_path, cluster)
    text = preview("--hook", "BeforeClusterUpgrade", "--cluster", path, "--to", "v1.33.0")
    assert f"backup-before-upgrade matches: answers from run {run.pk} (running)" in text
    assert Run.objects.count() == 1


@pytest.mark.usefixtures("templates")
def test_an_existing_run_waiting_for_approval_is_shown_as_such(tmp_path: Path) -> None:
    run = make_run(
        template="backup-before-upgrade",
        cluster="fleet/prod-eu-1",
        steps=(("snapshot", "wait", "succeeded"), ("approve", "approval", "waiting")),
    )
    Run.objects.filter(pk=run.pk).update(cluster_key=capi.cluster_v1beta2()["metadata"]["uid"])
    path = cluster_file(tmp_path, capi.cluster_v1beta2())
    args = ("--hook", "BeforeClusterUpgrade", "--cluster", path, "--to", "v1.33.0")
    text = preview(*args)
    assert (
        f"backup-before-upgrade matches: answers from run {run.pk} (waiting for approval)" in text
    )
    found = json.loads(preview(*args, "-o", "json"))["templates"][0]["existingRun"]
    assert found == {"id": run.pk, "state": "running", "displayState": "awaiting_approval"}


@pytest.mark.usefixtures("templates")
def test_no_matching_template_means_success_at_once(tmp_path: Path) -> None:
    path = cluster_file(tmp_path, capi.cluster_v1beta2(namespace="dev"))
    text = preview("--hook", "BeforeClusterDelete", "--cluster", path)
    assert text.splitlines()[-1] == "no template matches: the hook would answer Success at once"


@pytest.mark.usefixtures("templates")
def test_a_bypass_in_force_that_would_answer_the_call_is_shown(tmp_path: Path) -> None:
    """As on the hook path: a bypass of the hook for the cluster's namespace and labels
    answers instead of the matching templates; one for other labels does not."""
    hour = datetime.timedelta(hours=1)
    bypasses.bypass_open(
        hook="BeforeClusterUpgrade", duration=hour, actor="ops", reason="dev", selector="env=dev"
    )
    args = ["--hook", "BeforeClusterUpgrade", "--to", "v1.33.0", "--cluster"]
    prod = cluster_file(tmp_path, capi.cluster_v1beta2(labels={"env": "prod"}))
    assert "is in force for this call" not in preview(*args, prod)
    covering = bypasses.bypass_open(
        hook="BeforeClusterUpgrade", duration=hour, actor="ops", reason="restore drill"
    )
    text = preview(*args, prod)
    assert (
        f"bypass {covering.pk} is in force for this call: it would answer "
        "Success at once and start no run"
    ) in text
    call = wf.call("BeforeClusterUpgrade", cluster=capi.cluster_v1beta2(labels={"env": "prod"}))
    answered = answers.answer(call, handler_name="test")
    assert json.loads(preview(*args, prod, "-o", "json"))["bypass"]["message"] == (answered.message)
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--hook", "BeforeClusterUpgrade"), "--to is required for BeforeClusterUpgrade"),
        (("--hook", "AfterClusterUpgrade"), "--version is required for AfterClusterUpgrade"),
        (
            ("--hook", "BeforeClusterCreate", "--to", "v1.33.0"),
            "--to does not apply to BeforeClusterCreate",
        ),
        (
            ("--hook", "BeforeClusterCreate", "--setting", "profile"),
            "--setting takes KEY=VALUE, got 'profile'",
        ),
    ],
)
def test_bad_preview_options_are_errors(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    path = cluster_file(tmp_path, capi.cluster_v1beta2())
    with pytest.raises(CommandError) as caught:
        preview("--cluster", path, *args)
    assert str(caught.value) == message


def test_preview_runs_from_the_command_line_with_a_setting(tmp_path: Path) -> None:
    # Django's manage.py would take `--settings` as its settings module; `--setting` is ours.
    path = cluster_file(tmp_path, capi.cluster_v1beta2())
    command = ["workflows", "preview", "--hook", "BeforeClusterCreate", "--cluster", path]
    result = subprocess.run(
        [sys.executable, "manage.py", *command, "--setting", "profile=strict", "-o", "json"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "hooksvc.settings",
            "DATABASE_URL": servers.test_database_url(),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["hook"] == "BeforeClusterCreate"


def test_a_file_that_is_not_a_cluster_is_an_error(tmp_path: Path) -> None:
    path = cluster_file(tmp_path, {"kind": "Machine", "metadata": {"name": "m"}})
    with pytest.raises(CommandError) as caught:
        preview("--hook", "BeforeClusterCreate", "--cluster", path)
    assert str(caught.value) == f"{path}: cluster.kind must be 'Cluster', got \"Machine\""
