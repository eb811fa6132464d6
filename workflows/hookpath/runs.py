"""Find or create a hook call's runs: one run per (template, cluster, moment), for good.

`templates_and_runs` reads the hook's templates that match the call, their runs for this
moment, those runs' due steps and the hook's break-glass bypasses in one query (a
steady-state poll is that query alone).
`runs_ensure` creates the missing runs with an insert that the unique constraint arbitrates
(fifty concurrent calls make one run), and wakes the engine once they commit. The Cluster
watcher calls `runs_ensure` too, for deleted Clusters that CAPI calls no hook for.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any, NamedTuple

import psycopg
from django.db import IntegrityError, connection, transaction

from hooksvc.contract import wire
from workflows import clock
from workflows.definitions import spec, typed
from workflows.engine import dispatch, messages, sql
from workflows.hookpath import bypass, retry, selection
from workflows.models import Run, WorkflowTemplate

RUN_CONSTRAINT = "workflows_run_moment_uniq"


def wait_cycle(templates: Sequence[WorkflowTemplate]) -> list[str]:
    """A waitFor cycle among `templates` (names, as a path), [] if none; pure, no query.

    apply_workflows refuses dependsOn cycles of add-on profiles, but rows edited by hand
    (or applied one at a time) can still wait for each other.
    """
    graph = {t.name: list(typed.of(t.spec).wait_for) for t in sorted(templates, key=_name)}
    return spec.cycle(graph)


def _name(template: WorkflowTemplate) -> str:
    return template.name


class Found(NamedTuple):
    """What the hook's one query finds for a call."""

    templates: list[WorkflowTemplate]
    #: The templates' runs for this moment, by template name.
    runs: dict[str, Run]
    #: Those runs' due steps, by template name.
    steps: dict[str, list[retry.StepTimes]]
    #: The hook's break-glass bypasses in force for the cluster's namespace.
    bypasses: list[bypass.Active]


def templates_and_runs(call: wire.HookCall) -> Found:
    """The hook's templates that match `call`, their runs for this moment, those runs' due
    steps and the hook's bypasses in force, in one query."""
    hook = call.hook.name
    params: dict[str, str | datetime.datetime] = {
        "key": call.cluster.key,
        "moment": selection.moment_key(call),
        "hook": hook,
        "now": clock.now(),
        "namespace": call.cluster.namespace,
    }
    rows = _poll_rows(params)
    found = Found([], {}, {}, bypass.actives(_decode_json(rows[0][-1])) if rows else [])
    width = len(sql.TEMPLATE_COLUMNS)
    run_end = width + len(sql.RUN_ANSWER_COLUMNS)
    for row in rows:
        template = dict(zip(sql.TEMPLATE_COLUMNS, row[:width], strict=True))
        # jsonb comes as text through a raw cursor: each distinct spec is parsed once, and
        # its typed form with it (workflows.definitions.typed).
        template["spec"] = typed.decode(template["spec"])
        if not selection.matches(typed.of(template["spec"]), call):
            continue
        found.templates.append(WorkflowTemplate(hook=hook, **template))
        run = dict(zip(sql.RUN_ANSWER_COLUMNS, row[width:run_end], strict=True))
        if run["id"] is not None:
            run["spec"] = typed.decode(run["spec"])
            found.runs[template["name"]] = Run(**run)
            found.steps[template["name"]] = retry.step_times(_decode_json(row[run_end]))
    return found


def _poll_rows(params: dict[str, str | datetime.datetime]) -> list[tuple[Any, ...]]:
    """The hook query's rows, through a cursor that binds its parameters on the server, so
    that psycopg prepares the statement on its first use on a connection and PostgreSQL
    parses and plans it once per connection (HOOKSVC_DB_PREPARE; psycopg
    `_preparing.PrepareManager.get`: a threshold of 0 prepares at once, None never).
    Parsing and planning were most of the query's CPU in PostgreSQL (docs/performance.md,
    2026-11-24). Django's cursor binds on the client, which never prepares; this one is
    wrapped as Django wraps its own (its errors become Django's DatabaseError, and tests
    count it as a query)."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    if connection.connection.prepare_threshold is None:
        # HOOKSVC_DB_PREPARE=off: Django's cursor, whose one round trip (the simple query
        # protocol) costs PostgreSQL less than an unnamed statement's parse, bind, execute.
        cursor = connection.cursor()
    else:
        connection.validate_thread_sharing()
        with connection.wrap_database_errors:
            # Typed Any: django-stubs type the wrapped cursor as a CursorWrapper; Django
            # passes the driver's cursor (BaseDatabaseWrapper._prepare_cursor).
            raw: Any = psycopg.Cursor(connection.connection)
        cursor = (
            connection.make_debug_cursor(raw)
            if connection.queries_logged
            else connection.make_cursor(raw)
        )
    with cursor:
        cursor.execute(sql.TEMPLATES_AND_RUNS, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows


def _decode_json(value: Any) -> Any:
    # jsonb comes as text through a raw cursor of Django's connection (Django registers a text
    # loader for it; JSONField decodes it), json_agg's json comes decoded.
    return json.loads(value) if isinstance(value, str | bytes) else value


def runs_ensure(
    *,
    templates: Sequence[WorkflowTemplate],
    call: wire.HookCall,
    found: dict[str, Run] | None = None,
) -> list[Run]:
    """One run per template for this cluster and moment: found, or created exactly once."""
    moment = selection.moment_key(call)
    key = call.cluster.key
    if found is None:
        found = {
            r.template_name: r
            for r in Run.objects.filter(
                hook=call.hook.name,
                cluster_key=key,
                moment=moment,
                template_name__in=[t.name for t in templates],
            ).only(*sql.RUN_ANSWER_COLUMNS)
        }
    created: list[int] = []
    for template in templates:
        if template.name in found:
            continue
        run = _run_insert(template, call, moment)
        if run is None:  # another call created it first, or a template of the same name did
            run = Run.objects.only(*sql.RUN_ANSWER_COLUMNS).get(
                template_name=template.name, hook=call.hook.name, cluster_key=key, moment=moment
            )
        else:
            created.append(run.pk)
        found[template.name] = run
    # After commit: if the broker is down, the reconciler starts them (they are due now).
    dispatch.advance(created)
    return [found[t.name] for t in templates]


def _run_insert(template: WorkflowTemplate, call: wire.HookCall, moment: str) -> Run | None:
    now = clock.now()
    deadline = typed.of(template.spec).deadline_seconds
    try:
        with transaction.atomic():
            return Run.objects.create(
                template=template,
                template_name=template.name,
                template_generation=template.generation,
                spec=template.spec,
                hook=call.hook.name,
                cluster_key=call.cluster.key,
                cluster_namespace=call.cluster.namespace,
                cluster_name=call.cluster.name,
                moment=moment,
                context=selection.run_context(call),
                message=messages.run_starting(template.name),
                deadline_at=now + datetime.timedelta(seconds=deadline) if deadline else None,
                # Due now: if the wake-up message is lost, the reconciler starts it.
                wake_at=now,
            )
    except IntegrityError as exc:
        if _is_run_conflict(exc):
            return None
        raise


def _is_run_conflict(exc: IntegrityError) -> bool:
    """True only for the one-run-per-moment constraint; any other violation is a bug."""
    diag = getattr(exc.__cause__, "diag", None)  # psycopg's error, which Django chains
    return diag is not None and diag.constraint_name == RUN_CONSTRAINT
