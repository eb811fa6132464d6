"""`workflows preview`: what a hook call would start, from a Cluster file; starts nothing."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import CommandError, OutputWrapper

from hooksvc.contract import catalog, wire
from workflows.operators import access, selectors, states
from workflows.operators.cli import output

#: Version options of `preview`, by the request field they stand for.
_VERSION_OPTIONS = {
    "fromKubernetesVersion": ("from_version", "--from"),
    "toKubernetesVersion": ("to_version", "--to"),
    "kubernetesVersion": ("kubernetes_version", "--version"),
}


def register(sub: argparse._SubParsersAction[Any]) -> None:
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
    output.add_who(preview, acts=False)
    preview.set_defaults(handler=show_preview)


def show_preview(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    try:
        result = selectors.call_preview(_call(options), actor=output.actor_of(options, acts=False))
    except access.Denied as exc:
        raise CommandError(str(exc)) from None
    if options["output"] == "json":
        output.write_json(stdout, result)
        return
    cluster = result["cluster"]
    stdout.write(
        f"{result['hook']} for cluster {cluster['namespace']}/{cluster['name']} "
        f"(key {cluster['key']}), moment {result['moment']!r}"
    )
    matching = [t for t in result["templates"] if t["matches"]]
    for t in matching:
        existing = t["existingRun"]
        outcome = (
            f"answers from run {existing['id']} ({states.label(existing['displayState'])})"
            if existing
            else "would start a run"
        )
        stdout.write(f"workflowtemplate/{t['name']} matches: {outcome}")
        for i, s in enumerate(t["steps"], start=1):
            after = f"  dependsOn: {', '.join(s['dependsOn'])}" if s["dependsOn"] else ""
            stdout.write(f"  {i}. {s['name']} ({s['type']}){after}")
    for t in result["templates"]:
        if not t["matches"]:
            stdout.write(f"workflowtemplate/{t['name']} does not match:")
            for reason in t["mismatches"]:
                stdout.write(f"  {reason}")
    if not matching:
        stdout.write("no template matches: the hook would answer Success at once")
    elif result["bypass"]:
        stdout.write(
            f"bypass {result['bypass']['id']} is in force for this call: it would "
            "answer Success at once and start no run"
        )
        stdout.write(f"  {result['bypass']['message']}")


def _call(options: dict[str, Any]) -> wire.HookCall:
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
