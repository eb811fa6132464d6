"""What holds a cluster, and the ways out: `workflows why` prints it, the REST API answers it.

For each run of the cluster that holds it (workflows.operators.holding), grouped by hook and
moment (for UpdateMachine, a Machine and its desired spec): the run, how long it has held
and since when, the step it is at and why (a step that is retrying: its last error and
attempt count; a step that is stalled,
workflows.engine.stalls: for how long, its normal bound, and what it waits for), the last
time CAPI asked, and the exact commands that move it on (each runs as printed once `<why>`
is replaced; workflows/engine/messages.py writes them); a run waiting to start behind a
failed workflow (waitFor) names that workflow's run and the commands that retry or release
it. Unfinished runs that hold nothing are listed apart, each with why. A deletion held by
BeforeClusterDelete has one more way out, in CAPI itself: the Cluster's
`runtime.cluster.x-k8s.io/ok-to-delete` annotation (`OK_TO_DELETE`). A bypass in force for a
hook and the cluster is named with its group: while it lasts, the hook's calls answer
without these runs (workflows.hookpath.bypass). `cluster` returns it all as one JSON-ready
dict in camelCase, as the other reads do (workflows.operators.selectors).
"""

from __future__ import annotations

import datetime
from typing import Any

from workflows import clock
from workflows.engine import messages, stalls
from workflows.hookpath import bypass as hook_bypass
from workflows.models import HookCall, KnownCluster, Run, StepRun
from workflows.operators import access, bypasses, holding, selectors, states

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


class UnknownCluster(LookupError):
    """hooksvc has met no such cluster (or none the actor may view); the message says so."""


def cluster(
    namespace: str, name: str, *, actor: access.Actor, now: datetime.datetime | None = None
) -> dict[str, Any]:
    """What holds the cluster `namespace/name`, as `actor` may see it; UnknownCluster when
    hooksvc knows no run, hook call or watcher record of it."""
    now = now or clock.now()
    runs = list(
        selectors.runs_list(actor=actor, cluster_namespace=namespace, cluster_name=name)
        .prefetch_related("steps")
        .order_by("created_at", "pk")
    )
    if not runs and not (actor.may(access.Permission.VIEW, namespace) and _seen(namespace, name)):
        raise UnknownCluster(
            f"hooksvc knows no cluster {namespace}/{name}: no run, hook call or watcher record "
            f"names it (`{messages.command('workflows list')}` shows the clusters with runs)"
        )
    unfinished = [r for r in runs if states.of(r) in states.HOLDING]
    held = [r for r in unfinished if _holds(r, now)]
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in held:
        groups.setdefault((run.hook, run.moment), []).append(run)
    return {
        "cluster": {"namespace": namespace, "name": name},
        "runs": len(runs),
        "held": bool(held),
        "groups": [
            _group(namespace, name, hook, moment, members, now=now, actor=actor)
            for (hook, moment), members in groups.items()
        ],
        "apart": [_apart(run, now) for run in unfinished if not _holds(run, now)],
    }


def _holds(run: Run, now: datetime.datetime) -> bool:
    held = holding.held(run, now)
    return held is not None and held.holding


def _seen(namespace: str, name: str) -> bool:
    """Whether hooksvc has met the cluster other than by a run: a hook call or the watcher."""
    return (
        HookCall.objects.filter(cluster_namespace=namespace, cluster_name=name).exists()
        or KnownCluster.objects.filter(namespace=namespace, name=name).exists()
    )


def _time(moment: datetime.datetime | None) -> str | None:
    return moment.isoformat(timespec="seconds") if moment else None


def _group(
    namespace: str,
    name: str,
    hook: str,
    moment: str,
    runs: list[Run],
    *,
    now: datetime.datetime,
    actor: access.Actor,
) -> dict[str, Any]:
    labels = runs[0].context.get("cluster", {}).get("labels") or {}
    covering = bypasses.covering(hook=hook, namespace=namespace, labels=labels)
    return {
        "hook": hook,
        "moment": moment,
        # UpdateMachine: the Machine whose in-place update the runs are.
        "machine": selectors.machine(runs[0]),
        "bypass": _bypass(covering) if covering is not None else None,
        "lastCall": _last_call(runs[0], hook, moment),
        "runs": [_run(run, now, actor) for run in runs],
        "okToDelete": (
            f"kubectl annotate {CLUSTER_RESOURCE} {name} --namespace {namespace} {OK_TO_DELETE}="
            if hook == DELETE_HOOK
            else None
        ),
    }


def _bypass(bypass: hook_bypass.Active) -> dict[str, Any]:
    return {
        "id": bypass.id,
        "actor": bypass.actor,
        "reason": bypass.reason,
        "expiresAt": _time(bypass.expires_at),
        "until": hook_bypass.until(bypass.expires_at),
        "endCommand": messages.bypass_end_command(bypass.id),
    }


def _last_call(run: Run, hook: str, moment: str) -> dict[str, Any] | None:
    call = (
        HookCall.objects.filter(cluster_key=run.cluster_key, hook=hook, moment=moment)
        .order_by("-at", "-id")
        .first()
    )
    if call is None:
        return None
    return {"at": _time(call.at), "status": call.status, "retryAfter": call.retry_after}


def _run(run: Run, now: datetime.datetime, actor: access.Actor) -> dict[str, Any]:
    state = states.of(run)
    held = holding.held(run, now)
    steps = sorted(run.steps.all(), key=lambda s: s.position)
    current = next((s for s in steps if s.name == getattr(run, "step_name", None)), None)
    why = selectors.why(run)
    stalled = [(step, stalls.describe(step, now)) for step in steps]
    return {
        "run": selectors.run_summary(run),
        "heldSince": _time(held.since) if held else None,
        "heldSeconds": int(held.seconds(now)) if held else None,
        "heldFor": held.describe(now) if held else "",
        "step": {
            "name": current.name,
            "type": current.type,
            "state": current.state,
            "since": _time(current.finished_at or current.started_at),
            "stalled": stalls.describe(current, now),
        }
        if current is not None
        else None,
        "why": why,
        "message": run.message if run.message and run.message != why else "",
        "deadlineAt": _time(run.deadline_at),
        # Every step that made no progress for longer than is normal (parallel steps too).
        "stalledSteps": [
            {"name": step.name, "type": step.type, **found} for step, found in stalled if found
        ],
        "waysOut": _ways_out(run, state, steps, actor),
    }


def _way(label: str, action: str, run_id: int, command: str, step: str = "") -> dict[str, Any]:
    return {"label": label, "action": action, "run": run_id, "step": step, "command": command}


def _ways_out(
    run: Run, state: states.State, steps: list[StepRun], actor: access.Actor
) -> list[dict[str, Any]]:
    ways = []
    if state == states.State.AWAITING_APPROVAL:
        for step in steps:
            if states.step_waits_for_person(step):
                command = messages.approve_command(run.pk, step.name)
                ways.append(_way("approve it", "approve", run.pk, command, step.name))
    # A step whose failure names its own ways on (a gate of an abandoned rollout) would
    # fail again if retried: its message says what works instead.
    retry_fails = any(
        s.state == StepRun.State.FAILED and messages.names_ways_out(s.message) for s in steps
    )
    if state in (states.State.FAILED, states.State.CANCELLED) and not retry_fails:
        ways.append(_way("retry it", "retry", run.pk, messages.retry_command(run.pk)))
    blocker = selectors.blocked_by(run, actor=actor) if state == states.State.PENDING else None
    if blocker is not None:
        # It starts once what it waits for is retried (and succeeds) or released.
        retry, release = messages.retry_command(blocker.pk), messages.release_command(blocker.pk)
        ways.append(_way("retry what it waits for", "retry", blocker.pk, retry))
        ways.append(_way("release what it waits for", "release", blocker.pk, release))
    ways.append(_way("release it", "release", run.pk, messages.release_command(run.pk)))
    return ways


def _apart(run: Run, now: datetime.datetime) -> dict[str, Any]:
    held = holding.held(run, now)
    return {
        "run": selectors.run_summary(run),
        "holdsNothing": holding.never_holds(run) or (held.ended_by if held else ""),
    }
