"""The previous release's code can write to this release's schema (issue 32).

During an upgrade the migrate Job applies this release's migrations while the previous
release's web and workers still run (docs/deploy.md, "During a rollout"). Those insert rows
naming only the columns their models know; a column added since that is NOT NULL without a
database default refuses every such insert (0.1.0's worker failed every run's start on
`retry_for_seconds`). Here the test database, migrated to this release, takes:

- the rows 0.1.0's worker writes when it starts a run, in the SQL of e385ce1's models
  (`git show e385ce1:workflows/models.py`), and the new columns read their defaults;
- one row of every model of the previous release (tests/deploy/releases.py previous), as its
  migrations leave its models, with the values Django gives a field that is not set (its default,
  NULL where nullable, else a sample): what any insert of that release writes at least.
"""

from __future__ import annotations

import ast
import datetime
import re
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.models import Field, Model

from tests.deploy import releases

ROOT = Path(__file__).resolve().parent.parent.parent
#: The release the issue upgraded from; its models are read below as they were.
E385CE1 = "e385ce13658bce1f3489c3e582926e321f0657e3"

pytestmark = pytest.mark.django_db


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout


def _previous_release() -> str:
    return releases.previous().commit


def _insert(table: str, row: dict[str, Any], pk: str = "id") -> Any:
    columns = ", ".join(f'"{c}"' for c in row)
    marks = ", ".join(["%s"] * len(row))
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{table}" ({columns}) VALUES ({marks}) RETURNING "{pk}"',  # noqa: S608
            list(row.values()),
        )
        return cursor.fetchone()[0]


def _select(table: str, pk: int, columns: list[str]) -> dict[str, Any]:
    names = ", ".join(f'"{c}"' for c in columns)
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT {names} FROM "{table}" WHERE id = %s', [pk])  # noqa: S608
        return dict(zip(columns, cursor.fetchone(), strict=True))


def test_e385ce1s_worker_starts_a_run_on_this_schema() -> None:
    """The columns are e385ce1's StepRun, Run and RunEvent fields, in the order its models
    declare them (their Python defaults filled in, as Django's INSERT names every field)."""
    models_at_release = _git("show", f"{E385CE1}:workflows/models.py")
    assert "retry_for_seconds" not in models_at_release
    now = datetime.datetime.now(datetime.UTC)
    run = _insert(
        "workflows_run",
        {
            "template_id": None,
            "template_name": "backup",
            "template_generation": 1,
            "spec": '{"steps": []}',
            "hook": "BeforeClusterUpgrade",
            "cluster_key": "default/c1",
            "cluster_namespace": "default",
            "cluster_name": "c1",
            "moment": "v1.30.0",
            "context": "{}",
            "state": "running",
            "message": "",
            "created_at": now,
            "started_at": now,
            "finished_at": None,
            "deadline_at": None,
            "deadline_exceeded": False,
            "wake_at": now,
            "released": False,
        },
    )
    step = _insert(
        "workflows_steprun",
        {
            "run_id": run,
            "name": "backup",
            "position": 0,
            "type": "noop",
            "params": "{}",
            "depends_on": "[]",
            "timeout_seconds": None,
            "retries": 0,
            "waits_for_person": False,
            "state": "pending",
            "failures": 0,
            "started_at": None,
            "finished_at": None,
            "due_at": None,
            "memo": "{}",
            "output": "{}",
            "message": "",
            "lease_owner": "",
            "lease_expires_at": None,
            "claims": 0,
        },
    )
    event = _insert(
        "workflows_runevent",
        {
            "run_id": run,
            "step_name": "",
            "kind": "transition",
            "name": "pending->running",
            "actor": "",
            "reason": "",
            "message": "",
            "at": now,
            "details": "{}",
        },
    )
    assert _select(
        "workflows_steprun",
        step,
        ["retry_for_seconds", "progress_mark", "unrecorded", "lost_by", "call_timeout_seconds"],
    ) == {
        "retry_for_seconds": 0,
        "progress_mark": "",
        "unrecorded": 0,
        "lost_by": "",
        "call_timeout_seconds": None,
    }
    assert _select("workflows_runevent", event, ["actor_subject", "actor_email"]) == {
        "actor_subject": "",
        "actor_email": "",
    }


def _state_at(commit: str) -> Any:
    """The project's models as the release's migrations leave them (its newest migration)."""
    names = _git("ls-tree", "--name-only", commit, "workflows/migrations/").split()
    leaf = max(Path(n).stem for n in names if re.fullmatch(r"\d{4}_\w+\.py", Path(n).name))
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return loader.project_state(("workflows", leaf)).apps


def _declared_fields(commit: str) -> dict[str, set[str]]:
    """Field names each model class (a `models.Model` subclass) of the release's workflows/
    package assigns, in whichever module it lives."""
    files = _git("ls-tree", "-r", "--name-only", commit, "workflows/").split()
    declared: dict[str, set[str]] = {}
    for path in files:
        if not path.endswith(".py") or "/migrations/" in path:
            continue
        tree = ast.parse(_git("show", f"{commit}:{path}"))
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            if not any(ast.unparse(base) == "models.Model" for base in node.bases):
                continue
            fields = declared.setdefault(node.name, set())
            for stmt in node.body:
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) else None
                if isinstance(stmt, ast.AnnAssign):
                    target = stmt.target
                value = getattr(stmt, "value", None)
                if (
                    isinstance(target, ast.Name)
                    and isinstance(value, ast.Call)
                    and isinstance(value.func, ast.Attribute)
                    and re.search(r"Field$|ForeignKey$", value.func.attr)
                ):
                    fields.add(target.id)
    return declared


def _unset_value(field: Field[Any, Any], now: datetime.datetime) -> Any:
    """What Django writes for a field nobody set, or a sample where it needs one."""
    if field.has_default():
        return field.get_default()
    if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
        return now
    if field.null:
        return None
    if field.choices:
        return next(iter(field.flatchoices))[0]
    samples: dict[str, Any] = {
        # Unique where a model wants it (a user's name): no other row of this test has it.
        "CharField": secrets.token_hex(4)[: field.max_length],
        "TextField": "x",
        "BooleanField": False,
        "DateTimeField": now,
        "FloatField": 1.0,
        "BinaryField": b"",
        "JSONField": {},
    }
    return samples.get(field.get_internal_type(), 1)


def test_every_model_of_the_previous_release_inserts_into_this_schema() -> None:
    commit = _previous_release()
    old_apps = _state_at(commit)
    models: list[type[Model]] = list(old_apps.get_app_config("workflows").get_models())
    declared = _declared_fields(commit)
    for model in models:
        # The migrations' models are the release's models (makemigrations --check held it).
        names = {f.name for f in model._meta.concrete_fields if not f.auto_created}
        assert names == declared[model.__name__], model.__name__
    # The rows they point at (another app's, such as auth's users) go first, made alike.
    related: list[type[Model]] = []
    for model in [*models, *related]:
        for field in model._meta.concrete_fields:
            target = field.related_model
            if field.is_relation and target not in models and target not in related:
                related.append(target)  # type: ignore[arg-type]
    now = datetime.datetime.now(datetime.UTC)
    inserted: dict[str, Any] = {}
    pending = sorted([*models, *related], key=lambda m: m._meta.label_lower)
    while pending:
        ready = [
            m
            for m in pending
            if all(
                f.related_model._meta.label_lower in inserted  # type: ignore[union-attr]
                for f in m._meta.concrete_fields
                if f.is_relation
            )
        ]
        assert ready, f"no order of inserts for {pending}"
        for model in ready:
            row: dict[str, Any] = {}
            for field in model._meta.concrete_fields:
                if field.primary_key and field.auto_created:
                    continue
                if field.is_relation:
                    value: Any = inserted[field.related_model._meta.label_lower]  # type: ignore[union-attr]
                else:
                    value = field.get_db_prep_save(_unset_value(field, now), connection)
                row[str(field.column)] = value
            inserted[model._meta.label_lower] = _insert(
                model._meta.db_table,
                row,
                pk=str(model._meta.pk.column),
            )
            pending.remove(model)
    assert {m._meta.label_lower for m in models} <= set(inserted)
    assert len(models) >= 9
