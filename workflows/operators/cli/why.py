"""`workflows why NAMESPACE/NAME`: what holds each hook of a cluster, and the ways out.

For each run of the cluster that holds it (workflows.operators.holding), grouped by hook
and moment: the run, its state, how long it has held and since when, the step it is at and
why (a step that is retrying: its last error and attempt count), the last time CAPI asked,
and the exact commands that move it on (each runs as printed once `<why>` is replaced;
workflows/engine/messages.py writes them); a run waiting to start behind a failed workflow
(waitFor) names that workflow's run and the commands that retry or release it. Unfinished
runs that hold nothing (a hook CAPI does not wait for, `holdsLifecycle: false`, past a
`Proceed` deadline) are listed apart, each with why it holds nothing. A deletion
held by BeforeClusterDelete has one more way out, in CAPI itself: the Cluster's
`runtime.cluster.x-k8s.io/ok-to-delete` annotation (`OK_TO_DELETE`). A break-glass bypass
in force for a hook and the cluster is named with its group: while it lasts, the hook's
calls answer without these runs (workflows.hookpath.bypass).
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from django.core.management.base import CommandError, OutputWrapper
from django.utils import timezone

from workflows.engine import messages
from workflows.hookpath import bypass as hook_bypass
from workflows.models import HookCall, KnownCluster, Run, StepRun
from workflows.operators import access, bypasses, holding, selectors, states
from workflows.operators.cli import output

#: CAPI's annotation that lets a Cluster's deletion go on without BeforeClusterDelete:
#: its topology controller calls the hook only while the Cluster lacks it, and its
#: Cluster controller deletes a Cluster with a topology only once it has it
#: (kubernetes-sigs/cluster-api api/runtime/v1beta2/extensionconfig_types.go,
#: OkToDeleteAnnotation; core/reconcilers/topology/cluster/cluster_controller.go and
#: core/reconcilers/cluster/cluster_controller.go, reconcileDelete). CAPI sets it, to "",
#: once the hook answers without retryAfterSeconds.
OK_TO_DELETE = "runtime.cluster.x-k8s.io/ok-to-delete"
#: The hook that holds a Cluster's deletion.
DELETE_HOOK = "BeforeClusterDelete"
#: CAPI's Cluster resource, fully qualified: other CRDs are named `cluster` too.
CLUSTER_RESOURCE = "clusters.cluster.x-k8s.io"


def register(sub: argparse._SubParsersAction[Any]) -> None:
    why = sub.add_parser("why", help="what holds each hook of a cluster, and the ways out")
    why.add_argument("cluster", metavar="NAMESPACE/NAME")
    output.add_who(why, acts=False)
    why.set_defaults(handler=explain)


def explain(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    namespace, sep, name = options["cluster"].partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise CommandError(f"cluster {options['cluster']!r}: write it as NAMESPACE/NAME")
    now = timezone.now()
    actor = output.actor_of(options, acts=False)
    runs = list(
        selectors.runs_list(actor=actor, cluster_namespace=namespace, cluster_name=name)
        .prefetch_related("steps")
        .order_by("created_at", "pk")
    )
    if not runs and not (actor.may(access.Permission.VIEW, namespace) and _seen(namespace, name)):
        raise CommandError(
            f"hooksvc knows no cluster {namespace}/{name}: no run, hook call or watcher record "
            f"names it (`{messages.command('workflows list')}` shows the clusters with runs)"
        )
    unfinished = [r for r in runs if states.of(r) in states.HOLDING]
    held = [r for r in unfinished if _holds(r, now)]
    apart = [r for r in unfinished if not _holds(r, now)]
    if not held:
        stdout.write(
            f"nothing holds cluster {namespace}/{name}: "
            + (f"none of its {len(runs)} runs holds a hook" if runs else "it has no runs")
        )
        _write_apart(stdout, apart, now)
        return
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in held:
        groups.setdefault((run.hook, run.moment), []).append(run)
    stdout.write(f"cluster {namespace}/{name}: held by {_count(len(held))}")
    for (hook, moment), members in groups.items():
        stdout.write("")
        stdout.write(_group_line(hook, moment, members))
        labels = members[0].context.get("cluster", {}).get("labels") or {}
        covering = bypasses.covering(hook=hook, namespace=namespace, labels=labels)
        for line in _bypass_lines(covering):
            stdout.write(f"  {line}")
        asked = _last_call(members[0], hook, moment)
        if asked:
            stdout.write(f"  {asked}")
        for run in members:
            for line in _run_lines(run, now, actor):
                stdout.write(f"  {line}")
        if hook == DELETE_HOOK:
            for line in _ok_to_delete(namespace, name):
                stdout.write(f"  {line}")
    _write_apart(stdout, apart, now)


def _holds(run: Run, now: datetime.datetime) -> bool:
    held = holding.held(run, now)
    return held is not None and held.holding


def _write_apart(stdout: OutputWrapper, runs: list[Run], now: datetime.datetime) -> None:
    """Unfinished (or failed) runs of the cluster that hold nothing, and why not."""
    if not runs:
        return
    stdout.write("")
    stdout.write(
        f"{_count(len(runs))} of the cluster that hold{'s' if len(runs) == 1 else ''} nothing:"
    )
    for run in runs:
        held = holding.held(run, now)
        why_not = holding.never_holds(run) or (held.ended_by if held else "")
        at = f" {run.moment}" if run.moment else ""
        stdout.write(
            f"  run {run.pk} ({run.template_name}, {run.hook}{at}): "
            f"{states.of(run).label}; {why_not}"
        )


def _seen(namespace: str, name: str) -> bool:
    """Whether hooksvc has met the cluster other than by a run: a hook call or the watcher."""
    return (
        HookCall.objects.filter(cluster_namespace=namespace, cluster_name=name).exists()
        or KnownCluster.objects.filter(namespace=namespace, name=name).exists()
    )


def _group_line(hook: str, moment: str, runs: list[Run]) -> str:
    at = f" {moment}" if moment else ""
    return (
        f"{hook}{at}: {_count(len(runs))}; CAPI waits until every run below succeeds or is released"
    )


def _bypass_lines(bypass: hook_bypass.Active | None) -> list[str]:
    if bypass is None:
        return []
    return [
        f"bypass {bypass.id} by {bypass.actor} until "
        f"{hook_bypass.until(bypass.expires_at)}: {bypass.reason}",
        "  while it lasts, CAPI's calls of this hook answer Success without these runs",
        f"  end it early:  {messages.bypass_end_command(bypass.id)}",
    ]


def _count(runs: int) -> str:
    return f"{runs} run" + ("" if runs == 1 else "s")


def _last_call(run: Run, hook: str, moment: str) -> str:
    call = (
        HookCall.objects.filter(cluster_key=run.cluster_key, hook=hook, moment=moment)
        .order_by("-at", "-id")
        .first()
    )
    if call is None:
        return ""
    retry = f", retry after {call.retry_after} s" if call.retry_after else ""
    return f"CAPI last asked at {_time(call.at)}: answered {call.status}{retry}"


def _time(moment: datetime.datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _run_lines(run: Run, now: datetime.datetime, actor: access.Actor) -> list[str]:
    state = states.of(run)
    held = holding.held(run, now)
    held_for = f", held for {held.describe(now)}" if held is not None else ""
    lines = [f"run {run.pk} ({run.template_name}): {state.label}{held_for}"]
    steps = sorted(run.steps.all(), key=lambda s: s.position)
    current = next((s for s in steps if s.name == getattr(run, "step_name", None)), None)
    if current is not None:
        since = current.finished_at or current.started_at
        lines.append(
            f"  at step {current.name} ({current.type}, {current.state})"
            + (f" since {_time(since)}" if since else "")
        )
    why = selectors.why(run)
    lines.append(f"  why: {why}")
    if run.message and run.message != why:
        lines.append(f"  message: {run.message}")
    if run.deadline_at is not None:
        lines.append(f"  deadline: {_time(run.deadline_at)}")
    lines.append("  ways out:")
    lines.extend(f"    {way}" for way in _ways_out(run, state, steps, actor))
    return lines


def _ways_out(
    run: Run, state: states.State, steps: list[StepRun], actor: access.Actor
) -> list[str]:
    ways = []
    if state == states.State.AWAITING_APPROVAL:
        for step in steps:
            if states.step_waits_for_person(step):
                ways.append(f"approve it:  {messages.approve_command(run.pk, step.name)}")
    if state in (states.State.FAILED, states.State.CANCELLED):
        ways.append(f"retry it:    {messages.retry_command(run.pk)}")
    blocker = selectors.blocked_by(run, actor=actor) if state == states.State.PENDING else None
    if blocker is not None:
        # It starts once what it waits for is retried (and succeeds) or released.
        ways.append(f"retry what it waits for:    {messages.retry_command(blocker.pk)}")
        ways.append(f"release what it waits for:  {messages.release_command(blocker.pk)}")
    ways.append(f"release it:  {messages.release_command(run.pk)}")
    return ways


def _ok_to_delete(namespace: str, name: str) -> list[str]:
    return [
        "or let CAPI delete the Cluster without this hook: with this annotation on the Cluster",
        "(in the management cluster) CAPI calls BeforeClusterDelete no more and deletes it;",
        "hooksvc's runs stay as they are:",
        f"    kubectl annotate {CLUSTER_RESOURCE} {name} --namespace {namespace} {OK_TO_DELETE}=",
    ]
