"""`workflows why NAMESPACE/NAME`: what holds each hook of a cluster, and the ways out.

What it says is workflows.operators.explain's (the REST API answers the same, as JSON:
`-o json` prints that here); this module only lays it out: each hook and moment that holds
the cluster with its runs, how long each has held, its step, why, and the commands that
move it on; then the runs that hold nothing, each with why.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from workflows.engine import stalls
from workflows.operators import explain, states
from workflows.operators.cli import output

#: Kept here for the tests and hints that name it (workflows.operators.explain owns it).
OK_TO_DELETE = explain.OK_TO_DELETE


def register(sub: argparse._SubParsersAction[Any]) -> None:
    why = sub.add_parser("why", help="what holds each hook of a cluster, and the ways out")
    why.add_argument("cluster", metavar="NAMESPACE/NAME")
    why.add_argument("-o", "--output", choices=["text", "json"], default="text")
    output.add_who(why, acts=False)
    why.set_defaults(handler=show)


def show(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    namespace, sep, name = options["cluster"].partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise CommandError(f"cluster {options['cluster']!r}: write it as NAMESPACE/NAME")
    try:
        found = explain.cluster(namespace, name, actor=output.actor_of(options, acts=False))
    except explain.UnknownCluster as exc:
        raise CommandError(str(exc)) from None
    if options.get("output") == "json":
        output.write_json(stdout, found)
        return
    for line in lines(found):
        stdout.write(line)


def lines(found: dict[str, Any]) -> list[str]:
    """`explain.cluster`'s answer, as `workflows why` prints it."""
    cluster = f"{found['cluster']['namespace']}/{found['cluster']['name']}"
    held = sum(len(group["runs"]) for group in found["groups"])
    if not held:
        total = found["runs"]
        out = [
            f"nothing holds cluster {cluster}: "
            + (
                (
                    "its one run holds no hook"
                    if total == 1
                    else f"none of its {total} runs holds a hook"
                )
                if total
                else "it has no runs"
            )
        ]
        return out + _apart(found["apart"])
    out = [f"cluster {cluster}: held by {_count(held)}"]
    for group in found["groups"]:
        out += ["", _heading(group)]
        out += [f"  {line}" for line in _bypass(group["bypass"])]
        call = group["lastCall"]
        if call:
            retry = f", retry after {call['retryAfter']} s" if call["retryAfter"] else ""
            out.append(f"  CAPI last asked at {call['at']}: answered {call['status']}{retry}")
        for run in group["runs"]:
            out += [f"  {line}" for line in _run(run)]
        if group["okToDelete"]:
            out += [
                "  or let CAPI delete the Cluster without this hook: with this annotation on "
                "the Cluster",
                "  (in the management cluster) CAPI calls BeforeClusterDelete no more and "
                "deletes it;",
                "  hooksvc's runs stay as they are:",
                f"      {group['okToDelete']}",
            ]
    return out + _apart(found["apart"])


def _heading(group: dict[str, Any]) -> str:
    runs = _count(len(group["runs"]))
    machine = group["machine"]
    if machine is not None:
        return (
            f"{group['hook']} of Machine {machine['namespace']}/{machine['name']} (desired spec"
            f" {machine['desiredSpec']}): {runs}; CAPI holds the Machine's in-place update until"
            " every run below succeeds or is released"
        )
    at = f" {group['moment']}" if group["moment"] else ""
    return f"{group['hook']}{at}: {runs}; CAPI waits until every run below succeeds or is released"


def _count(runs: int) -> str:
    return f"{runs} run" + ("" if runs == 1 else "s")


def _bypass(bypass: dict[str, Any] | None) -> list[str]:
    if bypass is None:
        return []
    return [
        f"bypass {bypass['id']} by {bypass['actor']} until {bypass['until']}: {bypass['reason']}",
        "  while it lasts, CAPI's calls of this hook answer Success without these runs",
        f"  end it early:  {bypass['endCommand']}",
    ]


def _run(found: dict[str, Any]) -> list[str]:
    run = found["run"]
    held_for = f", held for {found['heldFor']}" if found["heldFor"] else ""
    out = [f"run {run['id']} ({run['template']}): {states.label(run['displayState'])}{held_for}"]
    step = found["step"]
    if step is not None:
        since = f" since {step['since']}" if step["since"] else ""
        out.append(f"  at step {step['name']} ({step['type']}, {step['state']}){since}")
    out.append(f"  why: {found['why']}")
    for stalled in found["stalledSteps"]:
        out += _stalled(stalled)
    if found["message"]:
        out.append(f"  message: {found['message']}")
    if found["deadlineAt"]:
        out.append(f"  deadline: {found['deadlineAt']}")
    out.append("  ways out:")
    for way in found["waysOut"]:
        # The commands line up: the run's own ways, and those of what it waits for.
        width = 13 if len(way["label"]) < 12 else 28
        out.append(f"    {(way['label'] + ':').ljust(width)}{way['command']}")
    return out


def _stalled(stalled: dict[str, Any]) -> list[str]:
    """A step that made no progress for longer than is normal, and what it waits for."""
    waits = stalled["waitsFor"] or "(it says nothing)"
    said = stalls.wording(stalled["name"], stalled["for"], stalled["normal"])
    return [
        f"  {said}, since {stalled['since']}",
        f"    it waits for: {waits}",
    ]


def _apart(runs: list[dict[str, Any]]) -> list[str]:
    """Unfinished (or failed) runs of the cluster that hold nothing, and why not."""
    if not runs:
        return []
    out = [
        "",
        f"{_count(len(runs))} of the cluster that hold{'s' if len(runs) == 1 else ''} nothing:",
    ]
    for found in runs:
        run = found["run"]
        at = f" {run['moment']}" if run["moment"] else ""
        out.append(
            f"  run {run['id']} ({run['template']}, {run['hook']}{at}): "
            f"{states.label(run['displayState'])}; {found['holdsNothing']}"
        )
    return out
