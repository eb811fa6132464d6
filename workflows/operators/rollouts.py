"""Rollouts: the gates waiting for canaries, grouped by version and wave; resume and abandon.

A rollout is every `gate` step (workflows.steps.gate) of BeforeClusterUpgrade runs to one
target version; a wave is one gated template. `overview` is what the fleet page and
`manage.py workflows rollout --list` show: each rollout, whether a failed canary halts it,
and each wave's clusters with what each waits for. `rollout_resume` sets the failed canary
runs aside (they halt no gate any more); `rollout_abandon` fails every gate of the version.
Both need the release permission in every namespace (a rollout spans them), record who
and why (RolloutAction, and a RunEvent on each run whose gate waits), log an
`operator_action` line, and wake the gates at once.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from django.db import transaction

from workflows import clock
from workflows.engine import dispatch, stepstate
from workflows.models import Run, RunEvent, StepRun
from workflows.operators import access, reasons
from workflows.rollout_actions import REASON_LENGTH, RolloutAction
from workflows.steps import gate

logger = logging.getLogger(__name__)

GATE_TYPE = "gate"


class RolloutError(Exception):
    """The rollout action does not apply (no such rollout, nothing to resume, no reason)."""


@dataclasses.dataclass(frozen=True)
class Member:
    """One cluster held at a wave: its run and what it waits for."""

    run_id: int
    cluster: str
    state: str
    message: str


@dataclasses.dataclass(frozen=True)
class Wave:
    template: str
    canaries: str
    clusters: tuple[Member, ...]


@dataclasses.dataclass(frozen=True)
class Rollout:
    version: str
    #: What halts it ("" if nothing): the failed canary's message.
    halt: str
    abandoned: str
    waves: tuple[Wave, ...]


#: The most gated runs the fleet page lays out; a resume or abandon reads them all.
SHOWN = 500


def _gated_runs(actor: access.Actor, limit: int | None = SHOWN) -> list[tuple[Run, StepRun]]:
    """Runs with a gate step not finished, that `actor` may see, with that step (the first
    `limit` of them; None: all)."""
    steps = (
        StepRun.objects.filter(type=GATE_TYPE, run__state__in=Run.ACTIVE)
        .exclude(state__in=StepRun.FINISHED)
        .filter(actor.where(access.Permission.VIEW, field="run__cluster_namespace"))
        .select_related("run")
        .order_by("run__template_name", "run__cluster_namespace", "run__cluster_name")
    )
    return [(s.run, s) for s in (steps if limit is None else steps[:limit])]


def overview(actor: access.Actor) -> list[Rollout]:
    """The rollouts under way: gates not passed yet, by version, then wave (template)."""
    by_version: dict[str, dict[str, list[tuple[Run, StepRun]]]] = {}
    for run, step in _gated_runs(actor):
        version = gate.target_version(run.context)
        by_version.setdefault(version, {}).setdefault(run.template_name, []).append((run, step))
    rollouts = []
    for version, waves in sorted(by_version.items()):
        halt, abandoned = _halt(version, waves)
        rollouts.append(
            Rollout(
                version=version,
                halt=halt,
                abandoned=abandoned,
                waves=tuple(
                    Wave(
                        template=name,
                        canaries=gate.selector_text(members[0][1].params.get("matchLabels", {})),
                        clusters=tuple(
                            Member(
                                run.pk,
                                f"{run.cluster_namespace}/{run.cluster_name}",
                                step.state,
                                run.message,
                            )
                            for run, step in members
                        ),
                    )
                    for name, members in sorted(waves.items())
                ),
            )
        )
    return rollouts


def summary(rollout: Rollout) -> dict[str, Any]:
    """A rollout as the API and `workflows rollout list -o json` give it (camelCase)."""
    return {
        "version": rollout.version,
        "halt": rollout.halt,
        "abandoned": rollout.abandoned,
        "waves": [
            {
                "template": wave.template,
                "canaries": wave.canaries,
                "clusters": [
                    {"runId": m.run_id, "cluster": m.cluster, "state": m.state, "why": m.message}
                    for m in wave.clusters
                ],
            }
            for wave in rollout.waves
        ],
    }


def action_summary(action: RolloutAction) -> dict[str, Any]:
    """A resume or abandon as the API answers it."""
    return {
        "id": action.pk,
        "version": action.version,
        "kind": action.kind,
        "runs": list(action.runs),
        "actor": action.actor,
        "reason": action.reason,
        "createdAt": action.created_at.isoformat(),
    }


def _halt(version: str, waves: dict[str, list[tuple[Run, StepRun]]]) -> tuple[str, str]:
    abandoned = RolloutAction.objects.filter(version=version, kind=RolloutAction.Kind.ABANDON)
    first = abandoned.order_by("created_at", "pk").first()
    if first is not None:
        return "", f"abandoned by {first.actor}: {first.reason}"
    for members in waves.values():
        run, step = members[0]
        seen = gate.canaries(
            step.params.get("matchLabels", {}),
            version,
            own_key=run.cluster_key,
            count=1,
            soak=0,
        )
        if seen.failed is not None:
            return gate.halted_message(seen.failed, version), ""
    return "", ""


def _failed_canaries(version: str) -> list[int]:
    """The failed canary runs of `version` that halt a gate now, each gate's in turn."""
    ids: set[int] = set()
    for run, step in _gated_runs(access.unrestricted("rollouts"), limit=None):
        if gate.target_version(run.context) != version:
            continue
        labels = step.params.get("matchLabels", {})
        while True:
            seen = gate.canaries(
                labels, version, own_key=run.cluster_key, count=1, soak=0, ignore=ids
            )
            if seen.failed is None:
                break
            ids.add(int(seen.failed["pk"]))
    return sorted(ids)


def _checked(actor: str | access.Actor, reason: str, what: str) -> access.Actor:
    """The actor, once they may act on rollouts and `reason` is one the record can keep."""
    who = access.actor_of(actor)
    # Who may not act learns that first, not whether the rollout is halted.
    who.require(access.Permission.RELEASE, "", what)
    wrong = reasons.problem(reason)
    if wrong:
        raise RolloutError(wrong)
    # Refused here, not by the database (the CLI has no form that bounds it, as the API has).
    if len(reason.strip()) > REASON_LENGTH:
        raise RolloutError(f"reason: at most {REASON_LENGTH} characters")
    return who


def _act(kind: str, version: str, who: access.Actor, reason: str, runs: list[int]) -> RolloutAction:
    now = clock.now()
    with transaction.atomic():
        action = RolloutAction.objects.create(
            version=version,
            kind=kind,
            runs=runs,
            actor=who.name,
            actor_subject=who.subject,
            actor_email=who.email,
            reason=reason.strip(),
            created_at=now,
        )
        # The gates waiting now, locked in id order as the engine locks steps alone; one an
        # attempt holds is skipped: it is being polled, and sees the action as it does.
        gates = list(
            StepRun.objects.filter(
                type=GATE_TYPE,
                state=StepRun.State.WAITING,
                run__state=Run.State.RUNNING,
                run__context__toKubernetesVersion=version,
            )
            .order_by("pk")
            .select_for_update(skip_locked=True, of=("self",))
            .values_list("pk", "run_id", "name")
        )
        stepstate.make_due([pk for pk, _, _ in gates], now)
        # Each held run's history says who let it go on, or stopped it, and why.
        RunEvent.objects.bulk_create(
            RunEvent(
                run_id=run_id,
                step_name=name,
                kind=RunEvent.Kind.ACTION,
                name=f"rollout_{kind}",
                actor=who.name,
                actor_subject=who.subject,
                actor_email=who.email,
                reason=action.reason,
                message=f"rollout to {version} {'resumed' if kind == 'resume' else 'abandoned'}",
            )
            for _, run_id, name in gates
        )
        dispatch.run_steps(pk for pk, _, _ in gates)
        fields: dict[str, Any] = {
            "action": "operator_action",
            "operation": f"rollout_{kind}",
            "actor": who.name,
            "reason": action.reason,
            "version": version,
            "runs": runs,
        }
        if who.subject:
            fields["actor_subject"] = who.subject
        message = f"operator {who.name} did rollout {kind} of {version}"
        transaction.on_commit(lambda: logger.info(message, extra=fields))
    return action


def rollout_resume(*, version: str, actor: str | access.Actor, reason: str) -> RolloutAction:
    """The failed canary runs that halt `version`'s gates no longer count."""
    who = _checked(actor, reason, "resume rollouts")
    failed = _failed_canaries(version)
    if not failed:
        raise RolloutError(f"no failed canary halts the rollout to {version}")
    return _act(RolloutAction.Kind.RESUME, version, who, reason, failed)


def rollout_abandon(*, version: str, actor: str | access.Actor, reason: str) -> RolloutAction:
    """Every gate of `version` fails its run: those clusters do not upgrade to it."""
    who = _checked(actor, reason, "abandon rollouts")
    if RolloutAction.objects.filter(version=version, kind=RolloutAction.Kind.ABANDON).exists():
        raise RolloutError(f"the rollout to {version} is abandoned already")
    return _act(RolloutAction.Kind.ABANDON, version, who, reason, [])
