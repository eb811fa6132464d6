"""`manage.py apply_workflows`: kubectl-style apply of template files, all or nothing.

Covers: created/configured/unchanged/pruned lines, applying twice changes nothing, the
generation moves only on change, --prune keeps runs' snapshots, --dry-run and a bad
document write nothing, and the command's exit code and stderr.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.workflows import documents
from workflows.definitions import apply as writes
from workflows.definitions import spec
from workflows.models import Run, WorkflowTemplate

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def apply(path: Path, *options: str) -> list[str]:
    out = io.StringIO()
    call_command("apply_workflows", "-f", str(path), *options, stdout=out)
    return out.getvalue().splitlines()


def write(tmp_path: Path, *docs: dict[str, object]) -> Path:
    path = tmp_path / "workflows.yaml"
    path.write_text(documents.dump(*docs))
    return path


def generations() -> dict[str, int]:
    return dict(WorkflowTemplate.objects.values_list("name", "generation"))


def test_apply_creates_templates_with_the_normalized_spec(tmp_path: Path) -> None:
    path = write(
        tmp_path, documents.template("a"), documents.template("b", hook="BeforeClusterDelete")
    )
    assert apply(path) == ["workflowtemplate/a created", "workflowtemplate/b created"]
    b = WorkflowTemplate.objects.get(name="b")
    assert (b.hook, b.generation, b.spec["retryAfterSeconds"]) == ("BeforeClusterDelete", 1, 10)
    assert b.spec["steps"][0]["retries"] == 3


def test_applying_the_same_file_twice_changes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, documents.template("a"), documents.template("b"))
    apply(path)
    before = list(WorkflowTemplate.objects.values_list("name", "generation", "updated_at"))
    assert apply(path) == ["workflowtemplate/a unchanged", "workflowtemplate/b unchanged"]
    assert list(WorkflowTemplate.objects.values_list("name", "generation", "updated_at")) == before


def test_the_generation_is_bumped_only_for_a_changed_template(tmp_path: Path) -> None:
    apply(write(tmp_path, documents.template("a"), documents.template("b")))
    lines = apply(write(tmp_path, documents.template("a"), documents.template("b", concurrency=2)))
    assert lines == ["workflowtemplate/a unchanged", "workflowtemplate/b configured"]
    assert generations() == {"a": 1, "b": 2}
    apply(
        write(
            tmp_path,
            documents.template("a", hook="BeforeClusterDelete"),
            documents.template("b", concurrency=2),
        )
    )
    assert generations() == {"a": 2, "b": 2}
    assert WorkflowTemplate.objects.get(name="a").hook == "BeforeClusterDelete"


def test_templates_missing_from_the_file_are_left_alone_without_prune(tmp_path: Path) -> None:
    apply(write(tmp_path, documents.template("a"), documents.template("b")))
    assert apply(write(tmp_path, documents.template("a"))) == ["workflowtemplate/a unchanged"]
    assert set(generations()) == {"a", "b"}


def test_prune_deletes_templates_missing_from_the_file_and_runs_keep_their_snapshot(
    tmp_path: Path,
) -> None:
    apply(write(tmp_path, documents.template("a"), documents.template("b")))
    b = WorkflowTemplate.objects.get(name="b")
    run = Run.objects.create(
        template=b,
        template_name="b",
        template_generation=b.generation,
        spec=b.spec,
        hook=b.hook,
        cluster_key="uid-1",
        cluster_namespace="prod",
        cluster_name="c1",
        moment="v1.33.0",
    )
    assert apply(write(tmp_path, documents.template("a")), "--prune") == [
        "workflowtemplate/a unchanged",
        "workflowtemplate/b pruned",
    ]
    assert set(generations()) == {"a"}
    run.refresh_from_db()
    assert (run.template_id, run.template_name, run.spec) == (None, "b", b.spec)


def test_dry_run_reports_what_would_change_and_writes_nothing(tmp_path: Path) -> None:
    apply(write(tmp_path, documents.template("a"), documents.template("b")))
    path = write(tmp_path, documents.template("a", concurrency=1), documents.template("c"))
    assert apply(path, "--prune", "--dry-run") == [
        "workflowtemplate/a configured (dry run)",
        "workflowtemplate/c created (dry run)",
        "workflowtemplate/b pruned (dry run)",
    ]
    assert generations() == {"a": 1, "b": 1}
    assert WorkflowTemplate.objects.get(name="a").spec["concurrency"] is None


def test_one_bad_document_in_a_file_writes_nothing(tmp_path: Path) -> None:
    apply(write(tmp_path, documents.template("a")))
    path = write(
        tmp_path,
        documents.template("a", concurrency=3),
        documents.template("new"),
        documents.template(
            "broken", steps=[{"name": "x", "type": "wait", "with": {"seconds": "5"}}]
        ),
    )
    with pytest.raises(CommandError) as caught:
        apply(path, "--prune")
    assert str(caught.value) == (
        f"{path}: document 3 (broken): spec.steps[0].with.seconds: must be a number"
    )
    assert generations() == {"a": 1}
    assert WorkflowTemplate.objects.get(name="a").spec["concurrency"] is None


def test_a_bad_file_exits_1_with_the_message_on_stderr(tmp_path: Path) -> None:
    path = write(tmp_path, documents.template("a", hook="BeforeUpgrade"))
    result = subprocess.run(
        [sys.executable, "manage.py", "apply_workflows", "-f", str(path)],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert f"{path}: document 1 (a): spec.hook: unknown hook 'BeforeUpgrade'" in result.stderr


def test_an_unreadable_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="cannot read"):
        apply(tmp_path / "missing.yaml")


def test_the_example_file_applies(tmp_path: Path) -> None:
    lines = apply(ROOT / "examples" / "workflows.yaml")
    assert lines and all(line.endswith(" created") for line in lines)
    assert apply(ROOT / "examples" / "workflows.yaml") == [
        line.replace("created", "unchanged") for line in lines
    ]


# --- template_upsert: the one writer of templates (apply_workflows, admin, profiles) ------


def test_an_upsert_of_the_same_spec_writes_nothing_and_a_change_bumps_the_generation() -> None:
    [doc] = spec.parse(documents.dump(documents.template("a")))
    assert writes.template_upsert(name="a", spec_=doc.spec) is writes.Outcome.CREATED
    before = WorkflowTemplate.objects.values_list("generation", "updated_at").get()
    assert writes.template_upsert(name="a", spec_=doc.spec) is writes.Outcome.UNCHANGED
    assert WorkflowTemplate.objects.values_list("generation", "updated_at").get() == before
    changed = {**doc.spec, "concurrency": 2}
    assert writes.template_upsert(name="a", spec_=changed, dry_run=True) is writes.Outcome.UPDATED
    assert generations() == {"a": 1}
    assert writes.template_upsert(name="a", spec_=changed) is writes.Outcome.UPDATED
    assert generations() == {"a": 2}


@pytest.mark.parametrize(
    ("holder", "origin"),
    [
        (writes.OPERATOR, "was made with apply_workflows or the admin"),
        (spec.RESOURCE, "comes from the Kubernetes resource workflowtemplates.hooks.hooksvc.io/a"),
        ("addonprofile:edge", "is generated from the AddonProfile 'edge'"),
    ],
)
def test_a_template_name_belongs_to_one_source(holder: str, origin: str) -> None:
    [doc] = spec.parse(documents.dump(documents.template("a")))
    writes.template_upsert(name="a", spec_=doc.spec, source=holder)
    for other in {writes.OPERATOR, spec.RESOURCE, "addonprofile:edge"} - {holder}:
        with pytest.raises(writes.SourceConflict) as caught:
            writes.template_upsert(name="a", spec_={**doc.spec, "concurrency": 2}, source=other)
        assert str(caught.value) == f"the WorkflowTemplate 'a' {origin}"
    assert WorkflowTemplate.objects.values_list("managed_by", "generation").get() == (holder, 1)


def test_apply_refuses_and_prune_keeps_a_template_that_comes_from_a_resource(
    tmp_path: Path,
) -> None:
    [doc] = spec.parse(documents.dump(documents.template("from-git")))
    writes.template_upsert(name="from-git", spec_=doc.spec, source=spec.RESOURCE)
    path = write(tmp_path, documents.template("from-git", concurrency=1))
    for options in ((), ("--dry-run",)):
        with pytest.raises(CommandError) as caught:
            apply(path, *options)
        assert str(caught.value) == (
            f"{path}: document 1 (from-git): metadata.name: the WorkflowTemplate 'from-git' "
            "comes from the Kubernetes resource workflowtemplates.hooks.hooksvc.io/from-git; "
            "rename one of them"
        )
    assert apply(write(tmp_path, documents.template("mine")), "--prune") == [
        "workflowtemplate/mine created"
    ]
    assert dict(WorkflowTemplate.objects.values_list("name", "managed_by")) == {
        "from-git": "resource",
        "mine": "",
    }


def test_every_problem_of_a_template_is_reported_at_once(tmp_path: Path) -> None:
    """One apply names every bad field of a template, not the first only (each fix took a
    round before); the good documents beside it are not written either."""
    path = write(
        tmp_path,
        documents.template("fine"),
        documents.template(
            "broken",
            retryAfterSeconds=0,
            onFailure="Explode",
            surprise=True,
            steps=[
                {"name": "x", "type": "wait", "with": {"seconds": "5"}},
                {"name": "Bad_Name", "type": "noop", "timeoutSeconds": -1},
                {"name": "y"},
            ],
        ),
    )
    with pytest.raises(CommandError) as caught:
        apply(path)
    at = f"{path}: document 2 (broken): "
    assert str(caught.value).splitlines() == [
        f"{at}spec.surprise: unknown field (known: {', '.join(spec.TEMPLATE_FIELDS)})",
        f"{at}spec.retryAfterSeconds: must be an integer from 1 to 2147483647",
        f"{at}spec.onFailure: must be one of Block, Fail, got 'Explode'",
        f"{at}spec.steps[0].with.seconds: must be a number",
        f"{at}spec.steps[1].name: must be a DNS-1123 label (at most 63 lower-case letters, "
        "digits or '-', starting and ending with a letter or digit), got 'Bad_Name'",
        f"{at}spec.steps[1].timeoutSeconds: must be an integer from 0 to 2147483647",
        f"{at}spec.steps[2].type: is required",
    ]
    assert not WorkflowTemplate.objects.exists()
