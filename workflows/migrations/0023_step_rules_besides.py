"""Two of the rules of migration 0018 asked of several steps done in one statement.

The chain's statement (queries.sql `succeed_and_claim_next`) records a step's success and
the successes of the inline steps run ahead of their claim, then claims what they make
due: one statement sees the rows as they were before it, so it names the steps it makes
done. These are 0018's `workflows_step_deps_done` and `workflows_step_last` with an array
of such steps (names, ids) instead of one; 0018's stay, for the release before this one.
"""

from django.db import migrations

FUNCTIONS = """
CREATE FUNCTION workflows_step_deps_done(
    step_run_id bigint, depends_on jsonb, also_done varchar[]
) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements_text(depends_on) AS d(name)
        WHERE d.name <> ALL(also_done) AND NOT EXISTS (
            SELECT 1 FROM workflows_steprun AS q
            WHERE q.run_id = step_run_id AND q.name = d.name
            AND q.state IN ('succeeded', 'skipped')
        )
    )
$$;

CREATE FUNCTION workflows_step_last(
    step_run_id bigint, step_id bigint, also_done bigint[]
) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM workflows_steprun AS o
        WHERE o.run_id = step_run_id AND o.id <> step_id AND o.id <> ALL(also_done)
        AND o.state NOT IN ('succeeded', 'skipped')
    )
$$;
"""
DROP = """
DROP FUNCTION IF EXISTS workflows_step_last(bigint, bigint, bigint[]);
DROP FUNCTION IF EXISTS workflows_step_deps_done(bigint, jsonb, varchar[]);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0022_bypass_update_machine"),
    ]

    operations = [
        migrations.RunSQL(FUNCTIONS, DROP),
    ]
