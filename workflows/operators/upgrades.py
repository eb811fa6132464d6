"""A dry run of a whole upgrade: every hook call CAPI makes for a plan, and what each would do.

`calls` lists the calls in CAPI's order for an upgrade plan, the one CAPI itself sends in
BeforeClusterUpgrade (`controlPlaneUpgrades`, `workersUpgrades`): BeforeClusterUpgrade once;
per control plane step BeforeControlPlaneUpgrade and AfterControlPlaneUpgrade; when the
workers upgrade to that version, BeforeWorkersUpgrade and AfterWorkersUpgrade; then
AfterClusterUpgrade at the target (kubernetes-sigs/cluster-api
`exp/topology/desiredstate/lifecycle_hooks.go`, `desired_state.go`
`computeControlPlaneVersion`; `reconcile_state.go` for AfterClusterUpgrade; each call
carries the plan's remaining steps). `dry_run` says, for each call, which templates would
run, the least time each takes (workflows.hookpath.retry.least_seconds), and the
maintenance windows and canary gates it would wait for, as they stand now. Reads only.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any

from hooksvc.contract import catalog, versions, wire
from workflows import clock, durations
from workflows.definitions import typed
from workflows.hookpath import retry, selection
from workflows.models import WorkflowTemplate
from workflows.operators import access
from workflows.steps import gate, windows


class PlanError(ValueError):
    """The plan does not make sense (steps past the target, workers ahead of the plan, a
    version Cluster API would refuse)."""


def calls(
    cluster: wire.Cluster,
    *,
    target: str,
    control_plane: Sequence[str] = (),
    workers: Sequence[str] = (),
    settings: dict[str, str] | None = None,
) -> list[wire.HookCall]:
    """The hook calls of upgrading `cluster` to `target` through these control plane and
    worker steps (default: one step each, straight to the target). A target or step
    Cluster API's webhook would refuse (no "v", not a semantic version, a decrease) is a
    PlanError, as is a target the Cluster is at already: CAPI would make no call."""
    start = cluster.topology_version
    for version in (target, *control_plane, *workers):
        wrong = versions.problem(version)
        if wrong:
            raise PlanError(wrong)
    wrong = versions.change_problem(start, target)
    if wrong:
        raise PlanError(f"{cluster.namespace}/{cluster.name}: {wrong}")
    if start == target:
        raise PlanError(
            f"{cluster.namespace}/{cluster.name} is at {target} already: no upgrade, no hook call"
        )
    cp_plan = list(control_plane) or [target]
    md_plan = list(workers) or [target]
    if cp_plan[-1] != target:
        raise PlanError(f"the control plane's last step must be the target {target}")
    unknown = [v for v in md_plan if v not in cp_plan]
    if unknown:
        raise PlanError(f"workers can only upgrade to control plane steps, not {unknown[0]}")
    if md_plan[-1] != target:
        raise PlanError(f"the workers' last step must be the target {target}")

    def call(hook: str, cp: str, md: str, **versions: str) -> wire.HookCall:
        return wire.HookCall(
            hook=catalog.HOOKS[hook],
            settings=dict(settings or {}),
            cluster=cluster,
            from_version=versions.get("from_version", ""),
            to_version=versions.get("to_version", ""),
            version=versions.get("version", ""),
            control_plane_upgrades=tuple(_after(cp_plan, cp)),
            workers_upgrades=tuple(_after(md_plan, md)),
        )

    found = [call("BeforeClusterUpgrade", start, start, from_version=start, to_version=target)]
    cp, md = start, start
    for step in cp_plan:
        found.append(call("BeforeControlPlaneUpgrade", cp, md, from_version=cp, to_version=step))
        cp = step
        found.append(call("AfterControlPlaneUpgrade", cp, md, version=cp))
        if cp in md_plan:
            found.append(call("BeforeWorkersUpgrade", cp, md, from_version=md, to_version=cp))
            md = cp
            found.append(call("AfterWorkersUpgrade", cp, md, version=md))
    found.append(call("AfterClusterUpgrade", cp, md, version=target))
    return found


def _after(plan: list[str], current: str) -> list[str]:
    """The plan's steps still ahead of `current` (all of them before the first)."""
    return plan[plan.index(current) + 1 :] if current in plan else list(plan)


def label(call: wire.HookCall) -> str:
    """`BeforeControlPlaneUpgrade v1.30.0->v1.31.0`, `AfterWorkersUpgrade v1.31.0`."""
    if call.to_version:
        return f"{call.hook.name} {call.from_version}->{call.to_version}"
    return f"{call.hook.name} {call.version}"


@dataclasses.dataclass(frozen=True)
class TemplateRun:
    name: str
    least_seconds: float
    steps: tuple[str, ...]
    #: What it would wait for beside its steps' time: windows and gates, as they stand now.
    waits: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class CallPlan:
    label: str
    hook: str
    templates: tuple[TemplateRun, ...]


def dry_run(
    planned: Sequence[wire.HookCall], *, actor: access.Actor, now: datetime.datetime | None = None
) -> list[CallPlan]:
    """What each call of `planned` would start and wait for; writes nothing."""
    now = now or clock.now()
    if planned:
        actor.require(
            access.Permission.VIEW, planned[0].cluster.namespace, "preview calls of clusters"
        )
    by_hook: dict[str, list[WorkflowTemplate]] = {}
    for template in WorkflowTemplate.objects.filter(
        hook__in={c.hook.name for c in planned}
    ).order_by("name"):
        by_hook.setdefault(template.hook, []).append(template)
    result = []
    for call in planned:
        runs = []
        for template in by_hook.get(call.hook.name, ()):
            spec = typed.of(template.spec)
            if not selection.matches(spec, call):
                continue
            runs.append(
                TemplateRun(
                    name=template.name,
                    least_seconds=retry.least_seconds(spec),
                    steps=tuple(f"{s.name} ({s.type})" for s in spec.steps),
                    waits=tuple(_waits(spec, call, now, actor)),
                )
            )
        result.append(CallPlan(label(call), call.hook.name, tuple(runs)))
    return result


def _waits(
    spec: typed.Template, call: wire.HookCall, now: datetime.datetime, actor: access.Actor
) -> list[str]:
    out = []
    for step in spec.steps:
        if step.type == "window":
            out.append(f"step {step.name}: {_window(step.params, now)}")
        elif step.type == "gate" and call.to_version:
            out.append(f"step {step.name}: {_gate(step.params, call, now, actor)}")
    return out


def _window(params: Any, now: datetime.datetime) -> str:
    try:
        schedule = windows.schedule(params)
    except windows.WindowError as exc:
        return f"an invalid window ({exc.field}: {exc})"
    verdict = windows.at(schedule, now)
    if verdict.open:
        left = durations.span(((verdict.closes_at or now) - now).total_seconds())
        return f"inside a maintenance window now (it closes in {left})"
    said = windows.waits_message(schedule, verdict, now)
    if verdict.opens_at is None:
        return said
    return f"{said} (in {durations.span((verdict.opens_at - now).total_seconds())})"


def _gate(params: Any, call: wire.HookCall, now: datetime.datetime, actor: access.Actor) -> str:
    version = call.to_version
    said = gate.waits_message(params, version)
    seen = gate.canaries(
        params.get("matchLabels") or {},
        version,
        own_key=call.cluster.key,
        count=None if params.get("all") else int(params.get("count") or 1),
        soak=float(params.get("soakSeconds") or 0),
    )
    if seen.abandoned is not None:
        return f"{said}: the rollout was abandoned by {seen.abandoned.actor}"
    if seen.failed is not None:
        shown = lambda ns: actor.may(access.Permission.VIEW, ns)  # noqa: E731
        halted = gate.halted_message(seen.failed, version, shown=shown)
        return f"{said}: {halted.split(';')[0]}"
    finished = (
        f"{len(seen.soaked_at)} of {durations.count(seen.needed, 'canary', 'canaries')}"
        " finished now"
    )
    if len(seen.soaked_at) >= seen.needed:
        ends = seen.soaked_at[seen.needed - 1]
        finished += ", passed" if ends <= now else f", the soak ends {gate.soak_end(ends)}"
    elif seen.too_few is not None:
        finished += f" (only {seen.too_few} Clusters have those labels now)"
    return f"{said}: {finished}"


def as_json(plans: Sequence[CallPlan]) -> list[dict[str, Any]]:
    return [
        {
            "call": p.label,
            "hook": p.hook,
            "templates": [
                {
                    "name": t.name,
                    "leastSeconds": t.least_seconds,
                    "steps": list(t.steps),
                    "waits": list(t.waits),
                }
                for t in p.templates
            ],
        }
        for p in plans
    ]
