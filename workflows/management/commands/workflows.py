"""`manage.py workflows list|show|retry|cancel|approve|skip|release|preview`: the operator CLI.

Reads come from `workflows.operators.selectors`; actions call `workflows.operators.actions`,
which lock, check, record who and why, and wake the engine. An action that does not apply
(`actions.ActionError`) exits 1 with its message.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from hooksvc.contract import catalog, wire
from workflows.models import Run
from workflows.operators import actions, selectors

#: Version options of `preview`, by the request field they stand for.
_VERSION_OPTIONS = {
    "fromKubernetesVersion": ("from_version", "--from"),
    "toKubernetesVersion": ("to_version", "--to"),
    "kubernetesVersion": ("kubernetes_version", "--version"),
}


def _table(rows: Sequence[Sequence[Any]]) -> str:
    cells = [["-" if c is None or c == "" else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def _default_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        raise CommandError("cannot tell who you are; pass --actor NAME") from None


class Command(BaseCommand):
    help = "List and show workflow runs, act on them, and preview what a hook call would start."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
        lister = sub.add_parser("list", help="runs, newest first")
        lister.add_argument("--state", choices=Run.State.values)
        lister.add_argument("--hook", choices=list(catalog.HOOKS))
        lister.add_argument("--cluster", metavar="NAMESPACE/NAME")
        lister.add_argument("--template", metavar="NAME")
        lister.add_argument("--limit", type=int, default=100, help="at most this many (100)")
        lister.add_argument("-o", "--output", choices=["table", "json"], default="table")
        show = sub.add_parser("show", help="a run with its steps and events")
        show.add_argument("run_id", type=int, metavar="RUN_ID")
        show.add_argument("-o", "--output", choices=["text", "json"], default="text")
        for name, helptext, step in (
            ("retry", "run failed or cancelled steps again", "optional"),
            ("cancel", "stop a run (the lifecycle keeps holding)", None),
            ("approve", "approve an approval step", "required"),
            ("skip", "skip a step; its dependents go on", "required"),
            ("release", "let the held lifecycle proceed", None),
        ):
            action = sub.add_parser(name, help=helptext)
            action.add_argument("run_id", type=int, metavar="RUN_ID")
            if step:
                action.add_argument("--step", required=step == "required", metavar="NAME")
            action.add_argument("--reason", required=True, metavar="TEXT", help="why (recorded)")
            action.add_argument("--actor", metavar="NAME", help="who (default: cli:<OS user>)")
        preview = sub.add_parser("preview", help="what a hook call would start; starts nothing")
        preview.add_argument("--hook", required=True, choices=list(catalog.HOOKS))
        preview.add_argument("--cluster", required=True, metavar="FILE", help="Cluster YAML/JSON")
        # Not --settings: Django's manage.py takes that (the settings module) before we see it.
        preview.add_argument(
            "--setting",
            dest="extension_settings",
            nargs="+",
            action="extend",
            default=[],
            metavar="K=V",
            help="an ExtensionConfig setting the call carries (repeatable)",
        )
        preview.add_argument("--from", dest="from_version", metavar="VERSION")
        preview.add_argument("--to", dest="to_version", metavar="VERSION")
        preview.add_argument("--version", dest="kubernetes_version", metavar="VERSION")
        preview.add_argument("-o", "--output", choices=["text", "json"], default="text")

    def handle(self, *args: Any, **options: Any) -> None:
        handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            "list": self._list,
            "show": self._show,
            "preview": self._preview,
        }
        handler = handlers.get(options["command"], self._act)
        handler(options)

    def _json(self, value: Any) -> None:
        self.stdout.write(json.dumps(value, indent=2, sort_keys=True))

    def _list(self, options: dict[str, Any]) -> None:
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
            self._json(summaries)
            return
        if not summaries:
            self.stdout.write("no runs")
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
        self.stdout.write(_table([header, *rows]))

    def _show(self, options: dict[str, Any]) -> None:
        run = selectors.run_detail(options["run_id"])
        if run is None:
            raise CommandError(f"run {options['run_id']} does not exist")
        if options["output"] == "json":
            self._json(run)
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
        self.stdout.write(_table([[f"{k}:", v] for k, v in fields]))
        self.stdout.write("\nsteps:")
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
        self.stdout.write(_table(steps) if run["steps"] else "none yet (the run has not started)")
        for s in run["steps"]:
            if s["output"]:
                self.stdout.write(
                    f"output of {s['name']}: {json.dumps(s['output'], sort_keys=True)}"
                )
        self.stdout.write("\nevents (oldest first):")
        events = [["AT", "STEP", "EVENT", "ACTOR", "REASON", "MESSAGE"]]
        for e in run["events"]:
            events.append([e["at"], e["step"], e["name"], e["actor"], e["reason"], e["message"]])
        self.stdout.write(_table(events))

    def _act(self, options: dict[str, Any]) -> None:
        command = options["command"]
        common = {
            "run_id": options["run_id"],
            "actor": options["actor"] or _default_actor(),
            "reason": options["reason"],
        }
        try:
            if command == "retry":
                run = actions.run_retry(**common, step_name=options["step"] or "")
            elif command == "cancel":
                run = actions.run_cancel(**common)
            elif command == "approve":
                run = actions.step_approve(**common, step_name=options["step"])
            elif command == "skip":
                run = actions.step_skip(**common, step_name=options["step"])
            else:
                run = actions.run_release(**common)
        except actions.ActionError as exc:
            raise CommandError(str(exc)) from None
        step = f" step {options['step']}" if options.get("step") else ""
        self.stdout.write(f"run {run.pk}{step}: {command} recorded (run is {run.state})")

    def _preview(self, options: dict[str, Any]) -> None:
        result = selectors.call_preview(self._call(options))
        if options["output"] == "json":
            self._json(result)
            return
        cluster = result["cluster"]
        self.stdout.write(
            f"{result['hook']} for cluster {cluster['namespace']}/{cluster['name']} "
            f"(key {cluster['key']}), moment {result['moment']!r}"
        )
        matching = [t for t in result["templates"] if t["matches"]]
        for t in matching:
            existing = t["existingRun"]
            outcome = (
                f"answers from run {existing['id']} ({existing['state']})"
                if existing
                else "would start a run"
            )
            self.stdout.write(f"workflowtemplate/{t['name']} matches: {outcome}")
            for i, s in enumerate(t["steps"], start=1):
                after = f"  dependsOn: {', '.join(s['dependsOn'])}" if s["dependsOn"] else ""
                self.stdout.write(f"  {i}. {s['name']} ({s['type']}){after}")
        for t in result["templates"]:
            if not t["matches"]:
                self.stdout.write(f"workflowtemplate/{t['name']} does not match")
        if not matching:
            self.stdout.write("no template matches: the hook would answer Success at once")

    def _call(self, options: dict[str, Any]) -> wire.HookCall:
        """The hook call `preview` imagines, from the Cluster file and the options."""
        hook = catalog.HOOKS[options["hook"]]
        path = options["cluster"]
        try:
            data = yaml.safe_load(Path(path).read_text("utf-8"))
            cluster = wire.parse_cluster(data)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise CommandError(f"{path}: cannot read a Cluster: {exc}") from None
        except wire.BadRequest as exc:
            raise CommandError(f"{path}: {exc}") from None
        settings: dict[str, str] = {}
        for pair in options["extension_settings"]:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise CommandError(f"--setting takes KEY=VALUE, got {pair!r}")
            settings[key] = value
        versions: dict[str, str] = {}
        for field, (option, flag) in _VERSION_OPTIONS.items():
            value = options[option]
            if value and field not in hook.version_fields:
                raise CommandError(f"{flag} does not apply to {hook.name}")
            if field in hook.version_fields:
                if not value and field == "fromKubernetesVersion":
                    # Before an upgrade, the Cluster still runs the version it comes from.
                    value = cluster.topology_version
                if not value:
                    raise CommandError(f"{flag} is required for {hook.name}")
                versions[field] = value
        return wire.HookCall(
            hook=hook,
            settings=settings,
            cluster=cluster,
            from_version=versions.get("fromKubernetesVersion", ""),
            to_version=versions.get("toKubernetesVersion", ""),
            version=versions.get("kubernetesVersion", ""),
        )
