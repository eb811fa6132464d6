-- The engine's hand-written SQL, one named statement each (workflows/engine/sql.py loads
-- them by name). Parameters are psycopg's (%(name)s); each statement's comment says what it
-- does and takes. The rules PostgreSQL judges are functions defined once, in migration
-- 0018_step_lifecycle: workflows_step_claimable (an attempt may claim the step now),
-- workflows_step_deps_done (every dependency succeeded or was skipped) and
-- workflows_step_last (no other step of its run is unfinished). What a statement writes
-- is decided by workflows/engine/lifecycle.py: a claim writes lifecycle.CLAIM_COLUMNS
-- (and started_at, once), a repeated poll lifecycle.REPEAT_COLUMNS; the test
-- tests/workflows/test_lifecycle_home.py holds these statements to those lists.


-- name: claim_steps
-- Lease the claimable steps among %(ids)s: the one claim of an attempt (lifecycle's
-- CLAIM_COLUMNS). The claimable condition is checked again on each row as updated, so a
-- row another claim leased meanwhile (it waited for that transaction) is left out. The ids
-- are an array, so that the plan looks each step up by its primary key. A lease lasts the
-- call's bound and the claim's own length (%(expires)s). Returns the step, what its attempt
-- needs of its run, and whether it is its run's last unfinished step.
UPDATE workflows_steprun AS s
SET lease_owner = %(owner)s,
    lease_expires_at = %(expires)s + make_interval(secs => coalesce(s.call_timeout_seconds, 0)),
    claims = s.claims + 1,
    unrecorded = s.unrecorded + 1,
    lost_by = CASE WHEN s.lease_owner <> '' THEN s.lease_owner ELSE s.lost_by END,
    started_at = coalesce(s.started_at, %(now)s)
FROM workflows_run AS r
WHERE r.id = s.run_id AND s.id = ANY(%(ids)s::bigint[])
  AND workflows_step_claimable(s.state, s.due_at, s.lease_owner, s.lease_expires_at, r.state, %(now)s)
RETURNING s.*, r.context, r.hook, r.cluster_namespace, r.cluster_name, r.template_name,
    workflows_step_last(s.run_id, s.id) AS last;


-- name: claim_promoted
-- Promote the pending steps %(ids)s whose dependencies are done (lifecycle.promote: ready,
-- due now) and claim them in the same UPDATE; their run is locked by the caller and running.
-- Parameters and columns as claim_steps.
UPDATE workflows_steprun AS s
SET state = 'ready',
    due_at = %(now)s,
    lease_owner = %(owner)s,
    lease_expires_at = %(expires)s + make_interval(secs => coalesce(s.call_timeout_seconds, 0)),
    claims = s.claims + 1,
    unrecorded = s.unrecorded + 1,
    lost_by = CASE WHEN s.lease_owner <> '' THEN s.lease_owner ELSE s.lost_by END,
    started_at = coalesce(s.started_at, %(now)s)
FROM workflows_run AS r
WHERE r.id = s.run_id AND s.id = ANY(%(ids)s::bigint[])
  AND s.state = 'pending' AND r.state = 'running'
  AND workflows_step_deps_done(s.run_id, s.depends_on)
RETURNING s.*, r.context, r.hook, r.cluster_namespace, r.cluster_name, r.template_name,
    workflows_step_last(s.run_id, s.id) AS last;


-- name: claim_due_waiting
-- The batch poller's claim: up to %(limit)s claimable waiting steps, most overdue first.
-- A step whose last attempt was not recorded (unrecorded > 0: its worker may have died
-- running it) is not batched: it is claimed alone (workers.reap and the reconciler send it),
-- so that a step that kills its worker takes no batch down with it. SKIP LOCKED passes
-- over rows another transaction holds. The selection is evaluated once (a materialized CTE:
-- as a subquery PostgreSQL may run it again per row, and the LIMIT would then claim more).
-- Parameters: limit, now, owner, expires. Columns as claim_steps.
WITH selected AS MATERIALIZED (
    SELECT c.id FROM workflows_steprun AS c JOIN workflows_run AS cr ON cr.id = c.run_id
    WHERE c.state = 'waiting' AND c.unrecorded = 0
      AND workflows_step_claimable(c.state, c.due_at, c.lease_owner, c.lease_expires_at, cr.state, %(now)s)
    ORDER BY c.due_at
    LIMIT %(limit)s
    FOR UPDATE OF c SKIP LOCKED
)
UPDATE workflows_steprun AS s
SET lease_owner = %(owner)s,
    lease_expires_at = %(expires)s + make_interval(secs => coalesce(s.call_timeout_seconds, 0)),
    claims = s.claims + 1,
    unrecorded = s.unrecorded + 1,
    lost_by = CASE WHEN s.lease_owner <> '' THEN s.lease_owner ELSE s.lost_by END,
    started_at = coalesce(s.started_at, %(now)s)
FROM workflows_run AS r
WHERE r.id = s.run_id AND s.id IN (SELECT id FROM selected)
  AND workflows_step_claimable(s.state, s.due_at, s.lease_owner, s.lease_expires_at, r.state, %(now)s)
RETURNING s.*, r.context, r.hook, r.cluster_namespace, r.cluster_name, r.template_name,
    workflows_step_last(s.run_id, s.id) AS last;


-- name: succeed_and_claim_next
-- The chain's one statement (lifecycle Path.CHAIN): lock the run (it must be running),
-- record a step's success by its lease (lifecycle.after's Write: `recorded` below), record
-- the steps run ahead of their claim (lifecycle.ahead's Write: `ran`), and promote and
-- claim the pending steps of the inline types %(inline)s that these successes make due
-- (their other dependencies done). Steps run ahead are pending inline steps whose code ran
-- after the recorded one's: all of them are written, or none (one is no longer pending, its
-- memo is not the one its code saw, or a dependency is not done), and then the claim is as
-- if none had run. A dependent it cannot promote alone is left to the run's scheduling.
-- Parameters: run, commit (synchronous_commit: on or off), id, token, owner, memo and
-- output (JSON text), started_at, finished_at, now, expires, inline; arrays for the steps
-- run ahead: ahead_ids, ahead_seen (the memo their code saw), ahead_memo, ahead_output
-- (JSON text), ahead_started_at, ahead_finished_at. Returns no row when the run is not
-- running; else one row per claimed step (`claimed`) and, when it claimed one step and no
-- other step of the run is ready or waiting, one per pending step left (not `claimed`:
-- what the next chain may run ahead), or one with NULL step columns: `recorded` (1, or 0
-- when the lease was lost), `ran` (how many steps run ahead were written), the step, its
-- run's columns, `last`.
WITH locked AS MATERIALIZED (
    SELECT r.id AS locked_run, r.context, r.hook, r.cluster_namespace, r.cluster_name,
        r.template_name, set_config('synchronous_commit', %(commit)s, true)
    FROM workflows_run AS r WHERE r.id = %(run)s AND r.state = 'running'
    FOR UPDATE OF r
), recorded AS (
    UPDATE workflows_steprun AS s
    SET state = 'succeeded', memo = %(memo)s::jsonb, output = %(output)s::jsonb,
        message = '', started_at = %(started_at)s, finished_at = %(finished_at)s,
        due_at = NULL, lease_owner = '', lease_expires_at = NULL, unrecorded = 0
    FROM locked
    WHERE s.id = %(id)s AND s.run_id = locked.locked_run AND s.claims = %(token)s
      AND s.lease_owner = %(owner)s AND s.state IN ('ready', 'waiting')
    RETURNING s.id AS recorded_id, s.name AS recorded_name, s.run_id AS recorded_run
), ahead AS MATERIALIZED (
    SELECT a.id, a.name, a.depends_on, v.memo, v.output, v.started_at, v.finished_at
    FROM recorded, unnest(
        %(ahead_ids)s::bigint[], %(ahead_seen)s::jsonb[], %(ahead_memo)s::jsonb[],
        %(ahead_output)s::jsonb[], %(ahead_started_at)s::timestamptz[],
        %(ahead_finished_at)s::timestamptz[]
    ) AS v(id, seen, memo, output, started_at, finished_at)
    JOIN workflows_steprun AS a ON a.id = v.id
    WHERE a.run_id = recorded.recorded_run AND a.state = 'pending' AND a.memo = v.seen
      AND a.type = ANY(%(inline)s::text[])
), taken AS MATERIALIZED (
    SELECT recorded.recorded_id, recorded.recorded_run,
        CASE WHEN every.ok THEN recorded.recorded_name || a.names
            ELSE ARRAY[recorded.recorded_name] END AS names,
        CASE WHEN every.ok THEN a.ids ELSE '{}'::bigint[] END AS ids
    FROM recorded, LATERAL (
        SELECT coalesce(array_agg(ahead.name), '{}'::varchar[]) AS names,
            coalesce(array_agg(ahead.id), '{}'::bigint[]) AS ids
        FROM ahead
    ) AS a, LATERAL (
        SELECT count(*) = cardinality(%(ahead_ids)s::bigint[]) AS ok FROM ahead
        WHERE workflows_step_deps_done(
            recorded.recorded_run, ahead.depends_on, recorded.recorded_name || a.names)
    ) AS every
), ran AS (
    UPDATE workflows_steprun AS s
    SET state = 'succeeded', memo = ahead.memo, output = ahead.output,
        message = '', started_at = ahead.started_at, finished_at = ahead.finished_at,
        due_at = NULL, lease_owner = '', lease_expires_at = NULL, unrecorded = 0
    FROM ahead, taken
    WHERE s.id = ahead.id AND s.id = ANY(taken.ids)
    RETURNING s.id
), promoted AS (
    UPDATE workflows_steprun AS p
    SET state = 'ready',
        due_at = %(now)s,
        lease_owner = %(owner)s,
        lease_expires_at = %(expires)s + make_interval(secs => coalesce(p.call_timeout_seconds, 0)),
        claims = p.claims + 1,
        unrecorded = p.unrecorded + 1,
        lost_by = CASE WHEN p.lease_owner <> '' THEN p.lease_owner ELSE p.lost_by END,
        started_at = coalesce(p.started_at, %(now)s)
    FROM taken
    WHERE p.run_id = taken.recorded_run AND p.state = 'pending' AND NOT p.id = ANY(taken.ids)
      AND p.type = ANY(%(inline)s::text[]) AND p.depends_on ?| taken.names
      AND workflows_step_deps_done(p.run_id, p.depends_on, taken.names)
    RETURNING p.*, workflows_step_last(p.run_id, p.id, taken.recorded_id || taken.ids) AS last
), left_over AS (
    SELECT o.*, false AS last FROM workflows_steprun AS o, taken
    WHERE o.run_id = taken.recorded_run AND o.state = 'pending' AND NOT o.id = ANY(taken.ids)
      AND o.id NOT IN (SELECT id FROM promoted) AND (SELECT count(*) FROM promoted) = 1
      AND NOT EXISTS (
          SELECT 1 FROM workflows_steprun AS b
          WHERE b.run_id = taken.recorded_run AND b.state IN ('ready', 'waiting')
            AND b.id <> taken.recorded_id
      )
)
SELECT (SELECT count(*) FROM recorded) AS recorded, (SELECT count(*) FROM ran) AS ran,
    rows.*, locked.context, locked.hook, locked.cluster_namespace, locked.cluster_name,
    locked.template_name
FROM locked LEFT JOIN (
    SELECT promoted.*, true AS claimed FROM promoted
    UNION ALL SELECT left_over.*, false FROM left_over
) AS rows ON true;


-- name: succeed_and_finish_run
-- The last step's success ends its run, one statement (lifecycle Path.FINISH): lock the run
-- (running, its deadline not passed: else its scheduling acts on it), record the step's
-- success by its lease (lifecycle.after's Write, as succeed_and_claim_next's) while it is
-- still its run's last unfinished step (workflows_step_last), and move the run to
-- succeeded with its transition event, as scheduling settles a run whose steps are all
-- done. Parameters: run, commit, id, token, owner, memo and output (JSON text),
-- started_at, finished_at, now (the run's finished_at, the deadline's test), at (the
-- event's time). Returns the run's row when all of it was written; else no row and nothing
-- written: the outcome goes through the run's scheduling.
WITH locked AS MATERIALIZED (
    SELECT r.id AS locked_run, set_config('synchronous_commit', %(commit)s, true)
    FROM workflows_run AS r
    WHERE r.id = %(run)s AND r.state = 'running'
      AND (r.deadline_at IS NULL OR r.deadline_exceeded OR r.deadline_at > %(now)s)
    FOR UPDATE OF r
), recorded AS (
    UPDATE workflows_steprun AS s
    SET state = 'succeeded', memo = %(memo)s::jsonb, output = %(output)s::jsonb,
        message = '', started_at = %(started_at)s, finished_at = %(finished_at)s,
        due_at = NULL, lease_owner = '', lease_expires_at = NULL, unrecorded = 0
    FROM locked
    WHERE s.id = %(id)s AND s.run_id = locked.locked_run AND s.claims = %(token)s
      AND s.lease_owner = %(owner)s AND s.state IN ('ready', 'waiting')
      AND workflows_step_last(s.run_id, s.id)
    RETURNING s.run_id AS recorded_run
), finished AS (
    UPDATE workflows_run AS r
    SET state = 'succeeded', message = '', finished_at = %(now)s, wake_at = NULL
    FROM recorded WHERE r.id = recorded.recorded_run
    RETURNING r.id, r.template_name, r.spec, r.hook, r.cluster_key, r.cluster_namespace,
        r.cluster_name, r.state, r.message, r.started_at, r.finished_at, r.wake_at
), event AS (
    INSERT INTO workflows_runevent
        (run_id, step_name, kind, name, actor, actor_subject, actor_email, reason, message,
         at, details)
    SELECT id, '', 'transition', 'running->succeeded', '', '', '', '', '', %(at)s, '{}'::jsonb
    FROM finished
)
SELECT * FROM finished;


-- name: record_first_poll
-- A step's first poll that its run's answer does not show (lifecycle Path.ALONE): ready ->
-- waiting by its lease, on its own row as a repeated poll is written, while its run is
-- running and already says %(run_says)s (scheduling wrote it when the step became due);
-- else nothing is written and the outcome goes through the run's scheduling. No decision
-- of the run's depends on it (both states are due), so it needs no run lock. Writes
-- lifecycle.after's Write for a Poll. Parameters: commit, id, token, owner, due_at, memo,
-- message, output (JSON text, or NULL to keep it), started_at, run_says. Returns the id.
UPDATE workflows_steprun AS s
SET state = 'waiting', due_at = %(due_at)s, memo = %(memo)s::jsonb, message = %(message)s,
    output = coalesce(%(output)s::jsonb, s.output), started_at = %(started_at)s,
    failures = 0, failing_since = NULL, lease_owner = '', lease_expires_at = NULL,
    unrecorded = 0
FROM (SELECT set_config('synchronous_commit', %(commit)s, true)) AS c, workflows_run AS r
WHERE s.id = %(id)s AND s.claims = %(token)s AND s.lease_owner = %(owner)s
  AND s.state = 'ready' AND r.id = s.run_id AND r.state = 'running'
  AND r.message = %(run_says)s
RETURNING s.id;


-- name: record_repeats
-- Repeated polls of waiting steps (and unpolled ones handed back), in one statement, where
-- the row still carries the attempt's lease (token and owner): lifecycle.REPEAT_COLUMNS, a
-- NULL keeping the column as it is. Rows are locked in id order first, as operators lock a
-- run's steps, so the two never deadlock. Parameters: arrays ids, tokens, due_at, memo,
-- message, output, started_at; owner. Returns the ids written.
WITH v AS (
    SELECT * FROM unnest(
        %(ids)s::bigint[], %(tokens)s::bigint[], %(due_at)s::timestamptz[], %(memo)s::jsonb[],
        %(message)s::varchar[], %(output)s::jsonb[], %(started_at)s::timestamptz[]
    ) AS v(id, claims, due_at, memo, message, output, started_at)
), locked AS MATERIALIZED (
    SELECT s.id FROM workflows_steprun AS s JOIN v ON v.id = s.id
    WHERE s.claims = v.claims AND s.lease_owner = %(owner)s AND s.state = 'waiting'
    ORDER BY s.id FOR UPDATE OF s
)
UPDATE workflows_steprun AS s
SET due_at = v.due_at,
    memo = coalesce(v.memo, s.memo),
    message = coalesce(v.message, s.message),
    output = coalesce(v.output, s.output),
    started_at = coalesce(s.started_at, v.started_at),
    lease_owner = '',
    lease_expires_at = NULL,
    unrecorded = 0
FROM v WHERE s.id = v.id AND s.id IN (SELECT id FROM locked)
RETURNING s.id;


-- name: extend_leases
-- The heartbeat extends this process' leases whose outcome waits past the lease's length,
-- skipping rows another transaction holds (the attempt recording, or an operator moving
-- the step on, which ends the lease anyway). Parameters: ids, tokens, expires, owner.
WITH v AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(expires)s::timestamptz[])
        AS v(id, claims, expires)
), locked AS MATERIALIZED (
    SELECT s.id FROM workflows_steprun AS s JOIN v ON v.id = s.id
    WHERE s.claims = v.claims AND s.lease_owner = %(owner)s
    ORDER BY s.id FOR UPDATE OF s SKIP LOCKED
)
UPDATE workflows_steprun AS s SET lease_expires_at = v.expires
FROM v WHERE s.id = v.id AND s.id IN (SELECT id FROM locked);


-- name: free_leases
-- The heartbeat ends this process' leases whose outcome it could not record (the database
-- went away mid-record), where the row still carries them. The attempt is not lost (its
-- process lives): it is not counted against the step. Parameters: ids, tokens, owner.
UPDATE workflows_steprun AS s
SET lease_owner = '', lease_expires_at = NULL, unrecorded = greatest(s.unrecorded - 1, 0)
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS v(id, claims)
WHERE s.id = v.id AND s.claims = v.claims AND s.lease_owner = %(owner)s;


-- name: free_leases_of
-- The reaper ends the leases of dead processes %(owners)s (claimed steps are due, so they
-- are among the due index's rows). Their attempts stay counted as not recorded (unrecorded):
-- a step whose attempts keep killing their worker fails (lifecycle.before_call), naming the
-- last of them (lost_by). Returns each freed step's id.
UPDATE workflows_steprun AS s SET lease_owner = '', lease_expires_at = NULL, lost_by = s.lease_owner
WHERE s.state IN ('ready', 'waiting') AND s.lease_owner = ANY(%(owners)s::text[])
RETURNING s.id;


-- name: overdue_steps
-- The reconciler's steps: claimable, due longer ago than %(late)s, and no batch claims
-- them (ready, or a waiting step whose last attempt was not recorded), of runs not sent in
-- the same pass (%(runs)s), most overdue first. Parameters: now, late, runs, limit.
SELECT s.id FROM workflows_steprun AS s JOIN workflows_run AS r ON r.id = s.run_id
WHERE workflows_step_claimable(s.state, s.due_at, s.lease_owner, s.lease_expires_at, r.state, %(now)s)
  AND s.due_at <= %(late)s AND (s.state = 'ready' OR s.unrecorded > 0)
  AND NOT s.run_id = ANY(%(runs)s::bigint[])
ORDER BY s.due_at
LIMIT %(limit)s;


-- name: engine_late
-- How late (seconds) the engine's oldest due work is: a claimable step, or a run due to
-- start (NULL when none is due). Each is the first entry of a partial index
-- (workflows_step_due_idx, workflows_run_wake_idx); a web process reads it once a second
-- (workflows.hookpath.backlog), not each hook call. Parameters: now.
SELECT extract(epoch FROM %(now)s - least(
    (SELECT min(ds.due_at) FROM workflows_steprun AS ds JOIN workflows_run AS dr ON dr.id = ds.run_id
     WHERE workflows_step_claimable(ds.state, ds.due_at, ds.lease_owner, ds.lease_expires_at, dr.state, %(now)s)),
    (SELECT min(pr.wake_at) FROM workflows_run AS pr
     WHERE pr.state = 'pending' AND pr.wake_at <= %(now)s)
)) AS late;


-- name: start_run
-- A pending run starts, one statement: it moves to running (saying %(message)s, woken at
-- %(wake_at)s: its deadline, or never), its transition event, and its step rows as
-- lifecycle.created says (arrays, one entry a step; conflicts ignored: made once). Its
-- caller holds the run's lock (lock_run). Parameters: run, message, now (its started_at,
-- the rules' time), wake_at, at (the event's time); arrays names, positions, types,
-- params and depends_on (JSON text), retries, retry_for_seconds, states, timeouts,
-- call_timeouts, waits_for_person, stalls. Returns one row when the run moved, with NULL
-- step columns if it made no step, else one a step it made, as run_steps returns them
-- (a new step is pending: PostgreSQL judges whether it is promotable, as run_steps does).
WITH moved AS (
    UPDATE workflows_run AS r
    SET state = 'running', message = %(message)s, started_at = %(now)s, wake_at = %(wake_at)s
    WHERE r.id = %(run)s AND r.state = 'pending'
    RETURNING r.id
), event AS (
    INSERT INTO workflows_runevent
        (run_id, step_name, kind, name, actor, actor_subject, actor_email, reason, message,
         at, details)
    SELECT id, '', 'transition', 'pending->running', '', '', '', '', %(message)s, %(at)s,
        '{}'::jsonb
    FROM moved
), made AS (
    INSERT INTO workflows_steprun
        (run_id, name, position, type, params, depends_on, retries, retry_for_seconds, state,
         timeout_seconds, call_timeout_seconds, waits_for_person, stall_seconds, failures,
         memo, output, message, claims, lease_owner)
    SELECT moved.id, v.name, v.position, v.type, v.params, v.depends_on, v.retries,
        v.retry_for_seconds, v.state, v.timeout_seconds, v.call_timeout_seconds,
        v.waits_for_person, v.stall_seconds, 0, '{}'::jsonb, '{}'::jsonb, '', 0, ''
    FROM moved, unnest(
        %(names)s::varchar[], %(positions)s::smallint[], %(types)s::varchar[],
        %(params)s::jsonb[], %(depends_on)s::jsonb[], %(retries)s::smallint[],
        %(retry_for_seconds)s::integer[], %(states)s::varchar[], %(timeouts)s::integer[],
        %(call_timeouts)s::integer[], %(waits_for_person)s::boolean[], %(stalls)s::integer[]
    ) AS v(name, position, type, params, depends_on, retries, retry_for_seconds, state,
        timeout_seconds, call_timeout_seconds, waits_for_person, stall_seconds)
    ON CONFLICT (run_id, name) DO NOTHING
    RETURNING id, run_id, name, position, type, depends_on, timeout_seconds,
        call_timeout_seconds, retries, retry_for_seconds, waits_for_person, state,
        stall_seconds, progress_at, progress_mark, stall_noticed_at, failures, failing_since,
        started_at, finished_at, due_at, message, lease_owner, lease_expires_at, claims,
        unrecorded, lost_by,
        workflows_step_claimable(state, due_at, lease_owner, lease_expires_at, 'running', %(now)s)
            AS claimable,
        state = 'pending' AND workflows_step_deps_done(run_id, depends_on) AS promotable
)
SELECT moved.id AS moved, made.* FROM moved LEFT JOIN made ON true ORDER BY made.position;


-- name: lock_run
-- Lock a run's row and read it (not its context: only a step's own attempt reads that);
-- set this transaction's synchronous_commit (%(commit)s: on or off). Its steps are read by
-- the next statement (run_steps), not joined here: under READ COMMITTED a row lock that
-- waited for another transaction re-reads only the locked row, and a joined table stays as
-- the statement's snapshot saw it (PostgreSQL documentation, "Transaction Isolation", Read
-- Committed). A run another worker was starting would then come back running with no
-- steps, and "every step done" holds of no steps. Parameters: commit, run.
SELECT r.id, r.template_id, r.template_name, r.template_generation, r.spec, r.hook,
    r.cluster_key, r.cluster_namespace, r.cluster_name, r.moment, r.state, r.message,
    r.created_at, r.started_at, r.finished_at, r.deadline_at, r.deadline_exceeded, r.wake_at,
    r.released
FROM (SELECT set_config('synchronous_commit', %(commit)s, true)) AS c, workflows_run AS r
WHERE r.id = %(run)s
FOR UPDATE OF r;


-- name: run_steps
-- A run's steps in their order, read once its row is locked (not their params, memo and
-- output: only a step's own attempt reads those), and what PostgreSQL judges of each at
-- %(now)s: `claimable`, and `promotable` (pending, every dependency done). Parameters: run, now.
SELECT s.id, s.run_id, s.name, s.position, s.type, s.depends_on, s.timeout_seconds,
    s.call_timeout_seconds, s.retries, s.retry_for_seconds, s.waits_for_person, s.state,
    s.stall_seconds, s.progress_at, s.progress_mark, s.stall_noticed_at, s.failures,
    s.failing_since, s.started_at, s.finished_at, s.due_at, s.message, s.lease_owner,
    s.lease_expires_at, s.claims, s.unrecorded, s.lost_by,
    workflows_step_claimable(s.state, s.due_at, s.lease_owner, s.lease_expires_at, r.state, %(now)s)
        AS claimable,
    s.state = 'pending' AND workflows_step_deps_done(s.run_id, s.depends_on) AS promotable
FROM workflows_steprun AS s JOIN workflows_run AS r ON r.id = s.run_id
WHERE s.run_id = %(run)s
ORDER BY s.position;


-- name: budget_lock
-- Serialises one template's starts (%(template)s) until the transaction ends, so two
-- workers never both take the last slot of its concurrency budget.
SELECT pg_advisory_xact_lock(hashtext('budget:' || %(template)s));


-- name: asynchronous_commit
-- This transaction's commit does not wait for the disk: a crash may lose it.
SET LOCAL synchronous_commit TO OFF;


-- name: worker_beat
-- This process is alive: its heartbeat row, on the database's clock. Parameters: owner.
INSERT INTO workflows_workerbeat (owner, started_at, beat_at)
VALUES (%(owner)s, statement_timestamp(), statement_timestamp())
ON CONFLICT (owner) DO UPDATE SET beat_at = EXCLUDED.beat_at;


-- name: any_dead_worker
-- Whether any process' heartbeat is older than %(dead)s seconds: a read, each batch poll's,
-- before anything is written.
SELECT 1 FROM workflows_workerbeat
WHERE beat_at < statement_timestamp() - make_interval(secs => %(dead)s) LIMIT 1;


-- name: forget_dead_workers
-- The processes whose heartbeat is older than %(dead)s seconds, forgotten (one reaper wins
-- each: the others find the row gone). A process that was only stalled beats again and is
-- a new row. Returns their owners.
DELETE FROM workflows_workerbeat
WHERE beat_at < statement_timestamp() - make_interval(secs => %(dead)s)
RETURNING owner;
