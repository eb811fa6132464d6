"""`workflows list` and `workflows show`: runs as tables or JSON (workflows.operators.selectors)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import CommandError, OutputWrapper
from django.utils import timezone

from hooksvc.contract import catalog
from workflows import durations
from workflows.operators import selectors, states
from workflows.operators.cli import output

#: The width `list` fits its table in.
WIDTH = 120


def register(sub: argparse._SubParsersAction[Any]) -> None:
    lister = sub.add_parser("list", help="runs, newest first")
    lister.add_argument("--state", choices=states.State.values, help="a display state")
    lister.add_argument("--hook", choices=list(catalog.MOMENTS))
    lister.add_argument("--cluster", metavar="NAMESPACE/NAME")
    lister.add_argument("--template", metavar="NAME")
    lister.add_argument("--limit", type=int, default=100, help="at most this many (100)")
    lister.add_argument(
        "-o",
        "--output",
        choices=["table", "wide", "json"],
        default="table",
        help=f"table (fits {WIDTH} columns), wide (adds HOOK and MOMENT, cuts nothing), json",
    )
    output.add_who(lister, acts=False)
    lister.set_defaults(handler=list_runs)
    show = sub.add_parser("show", help="a run with its steps and events")
    show.add_argument("run_id", type=int, metavar="RUN_ID")
    show.add_argument("-o", "--output", choices=["text", "json"], default="text")
    output.add_who(show, acts=False)
    show.set_defaults(handler=show_run)


def list_runs(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    namespace = name = None
    if options["cluster"]:
        namespace, sep, name = options["cluster"].partition("/")
        if not sep or not namespace or not name:
            raise CommandError("--cluster must be NAMESPACE/NAME")
    found = selectors.runs_list(
        actor=output.actor_of(options, acts=False),
        state=options["state"],
        hook=options["hook"],
        cluster_namespace=namespace,
        cluster_name=name,
        template=options["template"],
    )
    runs = list(found[: max(0, options["limit"])])
    summaries = [selectors.run_summary(r) for r in runs]
    if options["output"] == "json":
        output.write_json(stdout, summaries)
        return
    if not summaries:
        stdout.write("no runs")
        return
    now = timezone.now()
    wide = options["output"] == "wide"
    header = ["ID", "STATE", "TEMPLATE", "CLUSTER", "STEP", "WHY", "AGE"]
    if wide:
        header[3:3] = ["HOOK", "MOMENT"]
    rows = []
    for run, s in zip(runs, summaries, strict=True):
        row = [
            s["id"],
            s["displayState"],
            s["template"],
            f"{s['cluster']['namespace']}/{s['cluster']['name']}",
            (s["currentStep"] or {}).get("name"),
            s["why"],
            durations.span((now - run.created_at).total_seconds()),
        ]
        if wide:
            row[3:3] = [s["hook"], s["moment"]]
        rows.append(row)
    if wide:
        stdout.write(output.table([header, *rows]))
    else:
        # TEMPLATE, CLUSTER, STEP and WHY give way; WHY, what the list is read for, keeps
        # about twice the width of each other.
        shrink = {2: (12, 1), 3: (12, 1), 4: (10, 1), 5: (20, 2)}
        stdout.write(output.table([header, *rows], width=WIDTH, shrink=shrink))


def show_run(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    run = selectors.run_detail(options["run_id"], actor=output.actor_of(options, acts=False))
    if run is None:
        raise CommandError(f"run {options['run_id']} does not exist")
    if options["output"] == "json":
        output.write_json(stdout, run)
        return
    cluster = run["cluster"]
    fields = [
        ("run", run["id"]),
        ("template", f"{run['template']} (generation {run['templateGeneration']})"),
        ("hook", run["hook"]),
        ("cluster", f"{cluster['namespace']}/{cluster['name']} (key {cluster['key']})"),
        ("moment", run["moment"]),
        ("state", _state(run)),
        ("step", _step_line(run["currentStep"])),
        ("why", run["why"]),
        ("message", run["message"]),
        ("created", run["createdAt"]),
        ("started", run["startedAt"]),
        ("finished", run["finishedAt"]),
        ("deadline", run["deadlineAt"]),
    ]
    stdout.write(output.table([[f"{k}:", v] for k, v in fields]))
    stdout.write("\nsteps:")
    steps = [["NAME", "TYPE", "STATE", "FAILURES/RETRIES", "STARTED", "FINISHED", "MESSAGE"]]
    for s in run["steps"]:
        steps.append(
            [
                s["name"],
                s["type"],
                s["state"],
                f"{s['failures']}/{s['retries']}",
                s["startedAt"],
                s["finishedAt"],
                s["message"],
            ]
        )
    stdout.write(output.table(steps) if run["steps"] else "none yet (the run has not started)")
    for s in run["steps"]:
        if s["output"]:
            stdout.write(f"output of {s['name']}: {json.dumps(s['output'], sort_keys=True)}")
    stdout.write("\nevents (oldest first):")
    events = [["AT", "STEP", "EVENT", "ACTOR", "REASON", "MESSAGE"]]
    for e in run["events"]:
        # A person the identity provider signed in: their e-mail too (the subject is in -o json).
        actor = f"{e['actor']} ({e['actorEmail']})" if e["actorEmail"] else e["actor"]
        events.append([e["at"], e["step"], e["name"], actor, e["reason"], e["message"]])
    stdout.write(output.table(events))


def _state(run: dict[str, Any]) -> str:
    """The display state, and the engine's state where it says more (released from failed)."""
    shown = str(run["displayState"])
    return shown if shown == run["state"] else f"{shown} (run {run['state']})"


def _step_line(step: dict[str, Any] | None) -> str:
    return f"{step['name']} ({step['type']}, {step['state']})" if step else ""
