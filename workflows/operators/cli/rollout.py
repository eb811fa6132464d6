"""`workflows rollout`: the rollouts under way (`list`), and an operator's word on a halted
one: `resume VERSION` (the failed canaries no longer halt it) or `abandon VERSION` (its
gates fail their runs). Everything goes through workflows.operators.rollouts, which checks
the actor's right and records who and why.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from workflows.operators import access, rollouts
from workflows.operators.cli import output


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser(
        "rollout",
        help="list the rollouts waiting for canaries; resume or abandon a halted one",
        description=(
            "A rollout is every `gate` step of BeforeClusterUpgrade runs to one version "
            "(docs/rollouts.md). A failed canary halts it until it is resumed or abandoned."
        ),
    )
    parser.add_argument("action", choices=["list", "resume", "abandon"])
    parser.add_argument("version", nargs="?", metavar="VERSION", help="the target version")
    parser.add_argument("--reason", metavar="TEXT", help="why (recorded)")
    output.add_who(parser, acts=True)
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    parser.set_defaults(handler=handle)


def handle(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    action, version = options["action"], options["version"]
    if action == "list":
        _list(stdout, options)
        return
    if not version or not options["reason"]:
        raise CommandError(f"rollout {action} needs VERSION and --reason")
    act = rollouts.rollout_resume if action == "resume" else rollouts.rollout_abandon
    try:
        done = act(
            version=version, actor=output.actor_of(options, acts=True), reason=options["reason"]
        )
    except (rollouts.RolloutError, access.Denied) as exc:
        raise CommandError(str(exc)) from None
    if action == "resume":
        runs = ", ".join(str(r) for r in done.runs)
        stdout.write(f"rollout to {version} resumed: failed canary runs {runs} set aside")
    else:
        stdout.write(f"rollout to {version} abandoned: its gates fail their runs")


def _list(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    found = rollouts.overview(output.actor_of(options, acts=False))
    if options["output"] == "json":
        output.write_json(stdout, [rollouts.summary(r) for r in found])
        return
    if not found:
        stdout.write("no rollout waits for canaries")
        return
    rows: list[list[Any]] = [["VERSION", "WAVE", "CANARIES", "CLUSTER", "RUN", "WAITS FOR"]]
    for rollout in found:
        if rollout.halt or rollout.abandoned:
            stdout.write(f"{rollout.version}: {rollout.halt or rollout.abandoned}")
        for wave in rollout.waves:
            for member in wave.clusters:
                rows.append(
                    [rollout.version, wave.template, wave.canaries, member.cluster,
                     member.run_id, member.message]
                )  # fmt: skip
    stdout.write(output.table(rows))
