"""`make lint`'s migration check refuses what the previous release cannot run beside.

scripts/check_migrations.py lints every migration the previous release's commit
(releases.json) does not have with django-migration-linter 6.0 (3YOURMIND), which judges
the SQL `sqlmigrate` prints: sql_analyser/base.py `has_not_null_column` (a NOT NULL column
whose default is dropped again, as Django does for a Python-only default), DROP_COLUMN,
RENAME_*, and sql_analyser/postgresql.py `has_create_index` (an index built without
CONCURRENTLY on a table that exists), which the script makes an error. A temporary app
planted beside the project's holds one migration per case; one run judges them all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.deploy import releases

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_migrations.py"

HEADER = "from django.db import migrations, models\n\n\n"

#: Planted migrations, in order (each depends on the one before): name -> operations.
PLANTED = {
    "0001_initial": """
        migrations.CreateModel(
            name="Widget",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=20)),
                ("colour", models.CharField(max_length=20)),
            ],
        ),
    """,
    # The column of issue 32: a default in Python only, dropped again after the fill.
    "0002_size_python_default": """
        migrations.AddField("widget", "size", models.IntegerField(default=0)),
    """,
    "0003_weight_db_default": """
        migrations.AddField("widget", "weight", models.IntegerField(default=0, db_default=0)),
    """,
    # The same mistake beside a new table, whose identity column hid it from the linter.
    "0004_label_beside_a_new_table": """
        migrations.AddField("widget", "label", models.CharField(max_length=9, blank=True)),
        migrations.CreateModel(
            name="Gadget",
            fields=[("id", models.BigAutoField(primary_key=True, serialize=False))],
        ),
    """,
    "0005_drop_colour": """
        migrations.RemoveField("widget", "colour"),
    """,
    "0006_index_name": """
        migrations.AddIndex("widget", models.Index(fields=["name"], name="widget_name_idx")),
    """,
}


def _plant(root: Path) -> None:
    app = root / "plantedapp"
    (app / "migrations").mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "migrations" / "__init__.py").write_text("")
    previous = None
    for name, operations in PLANTED.items():
        dependencies = f'[("plantedapp", "{previous}")]' if previous else "[]"
        body = textwrap.indent(textwrap.dedent(operations).strip(), " " * 8)
        (app / "migrations" / f"{name}.py").write_text(
            HEADER
            + "class Migration(migrations.Migration):\n"
            + f"    dependencies = {dependencies}\n"
            + f"    operations = [\n{body}\n    ]\n"
        )
        previous = name
    (root / "planted_settings.py").write_text(
        "from tests.settings import *  # noqa: F403\n\n"
        'INSTALLED_APPS = [*INSTALLED_APPS, "plantedapp"]  # noqa: F405\n'
    )


def test_the_check_refuses_what_the_previous_release_cannot_run_beside(tmp_path: Path) -> None:
    _plant(tmp_path)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "planted_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    result = subprocess.run(
        [sys.executable, str(SCRIPT)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    verdicts = {
        "0001_initial": "OK",
        "0002_size_python_default": "ERR\n\tNOT NULL constraint on columns",
        "0003_weight_db_default": "OK",
        "0004_label_beside_a_new_table": "ERR\n\tNOT NULL constraint on columns",
        "0005_drop_colour": "ERR\n\tDROPPING columns",
        "0006_index_name": "ERR\n\tCREATE INDEX locks table",
    }
    for name, verdict in verdicts.items():
        assert f"(plantedapp, {name})... {verdict}" in out, out
    # The project's own migrations since the release pass, or are accepted with why.
    assert not re.search(r"\(workflows, \w+\)\.\.\. ERR", out), out
    # What to do, in words.
    previous = releases.previous()
    assert result.stderr.startswith(
        "check-migrations: a migration above is one the previous release "
        f"({previous.version}, {previous.commit[:7]})\n"
    ), result.stderr
    assert "give the new column a database default, `db_default=` as well as" in result.stderr


def test_make_lint_runs_the_check() -> None:
    dry = subprocess.run(
        ["make", "-n", "lint"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    assert "scripts/check_migrations.py" in dry.stdout
