"""`workflows list` and `workflows show`: runs as tables or JSON (workflows.operators.selectors)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from hooksvc.contract import catalog
from workflows.models import Run
from workflows.operators import selectors
from workflows.operators.cli import output


def register(sub: argparse._SubParsersAction[Any]) -> None:
    lister = sub.add_parser("list", help="runs, newest first")
    lister.add_argument("--state", choices=Run.State.values)
    lister.add_argument("--hook", choices=list(catalog.HOOKS))
    lister.add_argument("--cluster", metavar="NAMESPACE/NAME")
    lister.add_argument("--template", metavar="NAME")
    lister.add_argument("--limit", type=int, default=100, help="at most this many (100)")
    lister.add_argument("-o", "--output", choices=["table", "json"], default="table")
    lister.set_defaults(handler=list_runs)
    show = sub.add_parser("show", help="a run with its steps and events")
    show.add_argument("run_id", type=int, metavar="RUN_ID")
    show.add_argument("-o", "--output", choices=["text", "json"], default="text")
    show.set_defaults(handler=show_run)


def list_runs(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    namespace = name = None
    if options["cluster"]:
        namespace, sep, name = options["cluster"].partition("/")
        if not sep or not namespace or not name:
            raise CommandError("--cluster must be NAMESPACE/NAME")
    runs = selectors.runs_list(
        state=options["state"],
        hook=options["hook"],
        cluster_namespace=namespace,
        cluster_name=name,
        template=options["template"],
    )[: max(0, options["limit"])]
    summaries = [selectors.run_summary(r) for r in runs]
    if options["output"] == "json":
        output.write_json(stdout, summaries)
        return
    if not summaries:
        stdout.write("no runs")
        return
    header = ["ID", "STATE", "TEMPLATE", "HOOK", "CLUSTER", "MOMENT", "CREATED"]
    rows = [
        [
            s["id"],
            s["state"] + (",released" if s["released"] else ""),
            s["template"],
            s["hook"],
            f"{s['cluster']['namespace']}/{s['cluster']['name']}",
            s["moment"],
            s["createdAt"],
        ]
        for s in summaries
    ]
    stdout.write(output.table([header, *rows]))


def show_run(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    run = selectors.run_detail(options["run_id"])
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
        ("state", run["state"] + (", released" if run["released"] else "")),
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
        events.append([e["at"], e["step"], e["name"], e["actor"], e["reason"], e["message"]])
    stdout.write(output.table(events))
