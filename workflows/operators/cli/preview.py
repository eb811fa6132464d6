"""`workflows preview`: what a hook call would start, from a Cluster file; starts nothing."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import CommandError, OutputWrapper

from hooksvc.contract import catalog, wire
from workflows import durations
from workflows.definitions import policies
from workflows.hookpath import upgradeplan
from workflows.operators import access, selectors, states, upgrades
from workflows.operators.cli import output

#: Version options of `preview`, by the request field they stand for.
_VERSION_OPTIONS = {
    "fromKubernetesVersion": ("from_version", "--from"),
    "toKubernetesVersion": ("to_version", "--to"),
    "kubernetesVersion": ("kubernetes_version", "--version"),
}


def register(sub: argparse._SubParsersAction[Any]) -> None:
    preview = sub.add_parser(
        "preview",
        help="what a hook call (or a whole upgrade: --upgrade-to) would start; starts nothing",
    )
    preview.add_argument("--hook", choices=list(catalog.HOOKS), help="one call of this hook")
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
    preview.add_argument(
        "--upgrade-to",
        metavar="VERSION",
        help="instead of --hook: every hook call of upgrading the Cluster to VERSION",
    )
    preview.add_argument(
        "--control-plane-plan",
        metavar="V1,V2",
        help="the control plane's steps as CAPI plans them (default: the target)",
    )
    preview.add_argument(
        "--workers-plan", metavar="V1,V2", help="the workers' steps (default: the target)"
    )
    preview.add_argument("-o", "--output", choices=["text", "json"], default="text")
    output.add_who(preview, acts=False)
    preview.set_defaults(handler=show_preview)


def show_preview(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    if options.get("upgrade_to"):
        if options["hook"]:
            raise CommandError("give --hook for one call or --upgrade-to for an upgrade, not both")
        show_upgrade(stdout, options)
        return
    if not options["hook"]:
        raise CommandError("preview needs --hook HOOK (one call) or --upgrade-to VERSION")
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


def show_upgrade(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    """Every hook call of the upgrade, the templates each runs, their least time, and the
    windows and gates each waits for (workflows.operators.upgrades)."""
    cluster = _cluster(options["cluster"])
    for flag in ("from_version", "to_version", "kubernetes_version"):
        if options[flag]:
            raise CommandError("--upgrade-to takes its versions from the Cluster and the plan")
    target = options["upgrade_to"]
    control_plane = _versions(options["control_plane_plan"])
    workers = _versions(options["workers_plan"])
    policy_plan = None
    if not control_plane and not workers:
        policy_plan = _policy_plan(cluster, target)
        if policy_plan is not None:
            control_plane, workers = list(policy_plan.control_plane), list(policy_plan.workers)
    try:
        planned = upgrades.calls(
            cluster,
            target=target,
            control_plane=control_plane,
            workers=workers,
            settings=_settings(options),
        )
        plans = upgrades.dry_run(planned, actor=output.actor_of(options, acts=False))
    except (upgrades.PlanError, access.Denied) as exc:
        raise CommandError(str(exc)) from None
    if options["output"] == "json":
        output.write_json(stdout, upgrades.as_json(plans))
        return
    stdout.write(
        f"upgrade of {cluster.namespace}/{cluster.name} from {cluster.topology_version} to "
        f"{target}: {len(plans)} hook calls"
    )
    if policy_plan is not None:
        stdout.write(
            f"plan of upgrade policy {policy_plan.policy} (GenerateUpgradePlan): control plane "
            f"{', '.join(policy_plan.control_plane)}; workers {', '.join(policy_plan.workers)}"
        )
    total = 0.0
    for i, plan in enumerate(plans, start=1):
        stdout.write(f"{i}. {plan.label}")
        if not plan.templates:
            stdout.write("   no template matches: it proceeds at once")
        for t in plan.templates:
            total += t.least_seconds
            stdout.write(
                f"   workflowtemplate/{t.name}: at least {durations.span(t.least_seconds)}; "
                f"steps {', '.join(t.steps)}"
            )
            for wait in t.waits:
                stdout.write(f"     {wait}")
    stdout.write(
        f"least time of the workflows in all: {durations.span(total)}, "
        "plus the windows and gates above and CAPI's own rollouts"
    )


def _policy_plan(cluster: wire.Cluster, target: str) -> upgradeplan.Plan | None:
    """The plan GenerateUpgradePlan would answer for `cluster` (workers at its version), or
    None when no upgrade policy matches; a refusal is the hook's Failure message."""
    found = policies.upgrade_policies()
    namespace, labels, cluster_class = cluster.namespace, cluster.labels, cluster.class_name
    if not any(p.matches(namespace, labels, cluster_class) for p in found):
        return None
    try:
        policy = upgradeplan.matching(
            found,
            cluster=f"{namespace}/{cluster.name}",
            namespace=namespace,
            labels=labels,
            cluster_class=cluster_class,
        )
        return upgradeplan.plan(
            policy,
            control_plane=cluster.topology_version,
            workers=cluster.topology_version,
            target=target,
        )
    except upgradeplan.PlanError as exc:
        raise CommandError(f"GenerateUpgradePlan would answer Failure: {exc}") from None


def _versions(text: str | None) -> list[str]:
    return [v.strip() for v in (text or "").split(",") if v.strip()]


def _cluster(path: str) -> wire.Cluster:
    try:
        data = yaml.safe_load(Path(path).read_text("utf-8"))
        return wire.parse_cluster(data)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CommandError(f"{path}: cannot read a Cluster: {exc}") from None
    except wire.BadRequest as exc:
        raise CommandError(f"{path}: {exc}") from None


def _settings(options: dict[str, Any]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for pair in options["extension_settings"]:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"--setting takes KEY=VALUE, got {pair!r}")
        settings[key] = value
    return settings


def _call(options: dict[str, Any]) -> wire.HookCall:
    """The hook call `preview` imagines, from the Cluster file and the options."""
    hook = catalog.HOOKS[options["hook"]]
    cluster = _cluster(options["cluster"])
    settings = _settings(options)
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
