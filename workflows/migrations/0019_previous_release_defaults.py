"""Database defaults for the columns the previous release (0.1.0, e385ce1) does not write.

0011's `actor_subject`/`actor_email` (runs' events, bypasses) and `ended_by_*`, 0014's
`retry_for_seconds` and 0015's `progress_mark` are NOT NULL with a default in Python only:
Django fills existing rows with it and drops it again, so the previous release's code, which
inserts rows without naming them, failed every insert while it ran beside this schema during
an upgrade (issue 32: the old worker failed every run's start). A database default makes
those inserts work. Setting a default changes only the catalog (no rewrite, no scan), so it
is safe on a large table. `make lint` (scripts/check-migrations) now refuses such a column.

0011, 0014 and 0015 now add those columns with their database default already, so the
previous release also runs beside the states between them and this one while the migrate Job
applies them (tests/deploy/test_rolling_upgrade.py); this one keeps it for databases that
applied them before.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0018_step_lifecycle"),
    ]

    operations = [
        migrations.AlterField(
            model_name="bypass",
            name="actor_email",
            field=models.CharField(blank=True, db_default="", default="", max_length=254),
        ),
        migrations.AlterField(
            model_name="bypass",
            name="actor_subject",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AlterField(
            model_name="bypass",
            name="ended_by_email",
            field=models.CharField(blank=True, db_default="", default="", max_length=254),
        ),
        migrations.AlterField(
            model_name="bypass",
            name="ended_by_subject",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AlterField(
            model_name="runevent",
            name="actor_email",
            field=models.CharField(blank=True, db_default="", default="", max_length=254),
        ),
        migrations.AlterField(
            model_name="runevent",
            name="actor_subject",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AlterField(
            model_name="steprun",
            name="progress_mark",
            field=models.CharField(
                blank=True, db_default="", default="", editable=False, max_length=32
            ),
        ),
        migrations.AlterField(
            model_name="steprun",
            name="retry_for_seconds",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
    ]
