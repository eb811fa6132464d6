"""A step's life in one home (issue 30): the rules PostgreSQL judges are defined once, here.

- `workflows_step_claimable`: a step an attempt may claim now.
- `workflows_step_deps_done`: every step a step depends on is done (succeeded or skipped).
- `workflows_step_last`: no other step of the run is unfinished (its success ends the run).

Every statement of workflows/engine/queries.sql, and every read that asks the same
question (the engine's lateness, the reconciler, a run's scheduling), calls these; the
engine's Python asks PostgreSQL rather than stating them again (workflows.engine.lifecycle
holds the rest of a step's life). They are SQL functions, which the planner inlines, so a
statement that calls one still uses the partial index on due steps. A later release that
changes one adds a new name (`_v2`) rather than replacing it, so that the release before
it, running beside during an upgrade, keeps the rule it was written for.

Columns: `unrecorded`, the attempts claimed since the step's last recorded outcome (a claim
counts one, a recorded outcome or an operator's move resets it: a step whose attempts keep
killing their worker fails after HOOKSVC_STEP_LOST_ATTEMPTS), and `lost_by`, the process of
its last attempt that ended without an outcome ("last seen on host ..."). Both have a
database default, so the previous release's code inserts rows without knowing them.
"""

from django.db import migrations, models

FUNCTIONS = """
CREATE FUNCTION workflows_step_claimable(
    state varchar, due_at timestamptz, lease_owner varchar, lease_expires_at timestamptz,
    run_state varchar, at timestamptz
) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT state IN ('ready', 'waiting') AND due_at <= at
        AND (lease_owner = '' OR lease_expires_at <= at) AND run_state = 'running'
$$;

CREATE FUNCTION workflows_step_deps_done(
    step_run_id bigint, depends_on jsonb, also_done varchar DEFAULT ''
) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements_text(depends_on) AS d(name)
        WHERE d.name <> also_done AND NOT EXISTS (
            SELECT 1 FROM workflows_steprun AS q
            WHERE q.run_id = step_run_id AND q.name = d.name
            AND q.state IN ('succeeded', 'skipped')
        )
    )
$$;

CREATE FUNCTION workflows_step_last(
    step_run_id bigint, step_id bigint, also_done bigint DEFAULT 0
) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM workflows_steprun AS o
        WHERE o.run_id = step_run_id AND o.id <> step_id AND o.id <> also_done
        AND o.state NOT IN ('succeeded', 'skipped')
    )
$$;
"""
DROP = """
DROP FUNCTION IF EXISTS workflows_step_last(bigint, bigint, bigint);
DROP FUNCTION IF EXISTS workflows_step_deps_done(bigint, jsonb, varchar);
DROP FUNCTION IF EXISTS workflows_step_claimable(
    varchar, timestamptz, varchar, timestamptz, varchar, timestamptz
);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0016_rollout_actions"),
    ]

    operations = [
        migrations.AddField(
            model_name="steprun",
            name="unrecorded",
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="steprun",
            name="lost_by",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.RunSQL(FUNCTIONS, DROP),
    ]
