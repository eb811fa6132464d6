"""Stalls are visible (issue 22): when a step last made progress, and its normal bound.

`progress_at` is written by a trigger of workflows_steprun, so that every writer of a
step's row (the engine's statements, transitions, operator actions) records progress alike
without a word of its own, and only when what the step reports changed: a step polled
every few seconds that reports the same thing costs no write of it. What counts as
progress is defined once, here, and explained in workflows/engine/stalls.py: while the step
is due (ready or waiting) and not within a streak of failed attempts, a change of its
state, message or output. The digest of the last such report (`progress_mark`) makes a
poll after an error that reports what it reported before the error no progress.

Steps made before it have no progress time: the stall reads fall back to their start.
"""

from django.db import migrations, models

FUNCTION = """
CREATE FUNCTION workflows_step_progress() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    mark text;
BEGIN
    IF NEW.failures = 0 AND NEW.state IN ('ready', 'waiting') THEN
        mark := md5(NEW.state || chr(31) || NEW.message || chr(31) || NEW.output::text);
        IF NEW.progress_mark IS DISTINCT FROM mark THEN
            NEW.progress_mark := mark;
            NEW.progress_at := statement_timestamp();
        END IF;
    END IF;
    RETURN NEW;
END
$$;
"""
# An update that changes none of these (a claim, a lease's extension, a poll that reports
# the same) does not even call the function.
TRIGGERS = """
CREATE TRIGGER workflows_step_progress_update
    BEFORE UPDATE OF state, message, output, failures ON workflows_steprun
    FOR EACH ROW
    WHEN (NEW.state IS DISTINCT FROM OLD.state OR NEW.message IS DISTINCT FROM OLD.message
          OR NEW.output IS DISTINCT FROM OLD.output OR NEW.failures IS DISTINCT FROM OLD.failures)
    EXECUTE FUNCTION workflows_step_progress();
CREATE TRIGGER workflows_step_progress_insert
    BEFORE INSERT ON workflows_steprun
    FOR EACH ROW EXECUTE FUNCTION workflows_step_progress();
"""
DROP = """
DROP TRIGGER IF EXISTS workflows_step_progress_insert ON workflows_steprun;
DROP TRIGGER IF EXISTS workflows_step_progress_update ON workflows_steprun;
DROP FUNCTION IF EXISTS workflows_step_progress();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0014_step_liveness"),
    ]

    operations = [
        migrations.AddField(
            model_name="steprun",
            name="stall_seconds",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="steprun",
            name="progress_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="steprun",
            name="progress_mark",
            field=models.CharField(
                blank=True, db_default="", default="", editable=False, max_length=32
            ),
        ),
        migrations.AddField(
            model_name="steprun",
            name="stall_noticed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunSQL(FUNCTION + TRIGGERS, DROP),
    ]
