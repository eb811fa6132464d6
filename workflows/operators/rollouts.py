"""Rollouts: the gates waiting for canaries, grouped by version and wave; resume and abandon.

A rollout is every `gate` step (workflows.steps.gate) of BeforeClusterUpgrade runs to one
target version; a wave is one gated template. `overview` is what the fleet page and
`manage.py workflows rollout --list` show: each rollout, whether a failed canary halts it,
and each wave's clusters with what each waits for; an abandoned rollout stays listed while
its failed runs hold their clusters (not released). `rollout_resume` sets the failed canary
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
from django.db.models import Count, Min, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform

from hooksvc.contract import versions
from workflows import clock
from workflows.engine import dispatch, messages, stepstate
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
    #: Counted (`counted`, the fleet page): how many clusters the wave holds, and what they
    #: wait for (their runs' messages without hints), most said first, each with how many.
    count: int = 0
    says: tuple[tuple[str, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class Rollout:
    version: str
    #: What halts it ("" if nothing): the failed canary's message.
    halt: str
    abandoned: str
    waves: tuple[Wave, ...]

    @property
    def state(self) -> str:
        """abandoned, halted (a failed canary halts it) or waiting."""
        return "abandoned" if self.abandoned else "halted" if self.halt else "waiting"


#: The most gated runs the fleet page lays out; a resume or abandon reads them all.
SHOWN = 500


def _gates_holding() -> Q:
    """Gate steps that hold their cluster: not finished in a run under way, or failed in a
    failed run not released (an abandoned rollout's, a gate that timed out)."""
    return Q(run__state__in=Run.ACTIVE) & ~Q(state__in=StepRun.FINISHED) | Q(
        state=StepRun.State.FAILED, run__state=Run.State.FAILED, run__released=False
    )


def _holding_steps(actor: access.Actor, runs: QuerySet[Run] | None = None) -> QuerySet[StepRun]:
    """Gate steps that hold their run's cluster, of runs `actor` may see (and in `runs`)."""
    steps = StepRun.objects.filter(_gates_holding(), type=GATE_TYPE).filter(
        actor.where(access.Permission.VIEW, field="run__cluster_namespace")
    )
    return steps if runs is None else steps.filter(run__in=runs.values("pk"))


def _gated_runs(actor: access.Actor, limit: int | None = SHOWN) -> list[tuple[Run, StepRun]]:
    """Runs whose gate step holds them, that `actor` may see, with that step (the first
    `limit` of them; None: all)."""
    steps = (
        _holding_steps(actor)
        .select_related("run")
        .order_by("run__template_name", "run__cluster_namespace", "run__cluster_name")
    )
    return [(s.run, s) for s in (steps if limit is None else steps[:limit])]


def _canaries_of(step: StepRun) -> str:
    return gate.selector_text(step.params.get("matchLabels", {}))


def overview(actor: access.Actor) -> list[Rollout]:
    """The rollouts under way: gates not passed yet, by version, then wave (template), each
    cluster on its own (the first SHOWN)."""
    by_version: dict[str, dict[str, list[tuple[Run, StepRun]]]] = {}
    for run, step in _gated_runs(actor):
        version = gate.target_version(run.context)
        by_version.setdefault(version, {}).setdefault(run.template_name, []).append((run, step))
    rollouts = []
    for version, waves in sorted(by_version.items()):
        halt, abandoned = _halt(version, [m[0] for m in waves.values()], actor)
        rollouts.append(
            Rollout(
                version=version,
                halt=halt,
                abandoned=abandoned,
                waves=tuple(
                    Wave(
                        template=name,
                        canaries=_canaries_of(members[0][1]),
                        clusters=tuple(
                            Member(
                                run.pk,
                                f"{run.cluster_namespace}/{run.cluster_name}",
                                step.state,
                                run.message,
                            )
                            for run, step in members
                        ),
                        count=len(members),
                    )
                    for name, members in sorted(waves.items())
                ),
            )
        )
    return rollouts


def counted(actor: access.Actor, runs: QuerySet[Run] | None = None) -> list[Rollout]:
    """The rollouts under way, each wave counted rather than listed (the fleet page): how
    many clusters it holds and what they wait for; only the runs in `runs` (the page's
    filters), however many. One grouped query, and one for a gate of each wave."""
    rows = (
        _holding_steps(actor, runs)
        .annotate(version=KeyTextTransform("toKubernetesVersion", "run__context"))
        .values("version", "run__template_name", "run__message")
        .annotate(n=Count("pk"), first=Min("pk"))
    )
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        key = (row["version"] or "", row["run__template_name"])
        grouped.setdefault(key, []).append(dict(row))
    firsts = {
        s.pk: s
        for s in StepRun.objects.filter(
            pk__in=[min(r["first"] for r in g) for g in grouped.values()]
        ).select_related("run")
    }
    by_version: dict[str, list[Wave]] = {}
    gates: dict[str, list[tuple[Run, StepRun]]] = {}
    for (version, template), group in sorted(grouped.items()):
        said: dict[str, int] = {}
        for counted_row in group:
            text = messages.without_hints(counted_row["run__message"])
            said[text] = said.get(text, 0) + counted_row["n"]
        step = firsts[min(r["first"] for r in group)]
        gates.setdefault(version, []).append((step.run, step))
        by_version.setdefault(version, []).append(
            Wave(
                template=template,
                canaries=_canaries_of(step),
                clusters=(),
                count=sum(said.values()),
                says=tuple(sorted(said.items(), key=lambda kv: (-kv[1], kv[0]))),
            )
        )
    found = []
    for version, waves in by_version.items():
        halt, abandoned = _halt(version, gates[version], actor)
        found.append(Rollout(version, halt, abandoned, tuple(waves)))
    return found


def summary(rollout: Rollout) -> dict[str, Any]:
    """A rollout as the API and `workflows rollout list -o json` give it (camelCase)."""
    return {
        "version": rollout.version,
        "state": rollout.state,
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


def _halt(version: str, gates: list[tuple[Run, StepRun]], actor: access.Actor) -> tuple[str, str]:
    """What halts the rollout, or who abandoned it; a failed canary named only to an actor
    who may see its namespace (gate.canary_named)."""
    abandoned = RolloutAction.objects.filter(version=version, kind=RolloutAction.Kind.ABANDON)
    first = abandoned.order_by("created_at", "pk").first()
    if first is not None:
        return "", f"abandoned by {first.actor}: {first.reason}"
    for run, step in gates:
        seen = gate.canaries(
            step.params.get("matchLabels", {}),
            version,
            own_key=run.cluster_key,
            count=1,
            soak=0,
        )
        if seen.failed is not None:
            shown = lambda ns: actor.may(access.Permission.VIEW, ns)  # noqa: E731
            return gate.halted_message(seen.failed, version, shown=shown), ""
    return "", ""


def _failed_canaries(version: str) -> list[int]:
    """The failed canary runs of `version` that halt a gate now, each gate's in turn."""
    ids: set[int] = set()
    for run, step in _gated_runs(access.unrestricted("rollouts"), limit=None):
        if gate.target_version(run.context) != version or step.state == StepRun.State.FAILED:
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


def _version_checked(version: str) -> None:
    """A version as Cluster API writes it, or an error naming the one meant (`1.33.0`: the
    gates wait for `v1.33.0`, and an action on `1.33.0` would touch none of them)."""
    wrong = versions.problem(version)
    if wrong:
        raise RolloutError(f"VERSION {wrong}")


def rollout_resume(*, version: str, actor: str | access.Actor, reason: str) -> RolloutAction:
    """The failed canary runs that halt `version`'s gates no longer count."""
    who = _checked(actor, reason, "resume rollouts")
    _version_checked(version)
    failed = _failed_canaries(version)
    if not failed:
        raise RolloutError(f"no failed canary halts the rollout to {version}")
    return _act(RolloutAction.Kind.RESUME, version, who, reason, failed)


def rollout_abandon(*, version: str, actor: str | access.Actor, reason: str) -> RolloutAction:
    """Every gate of `version` fails its run: those clusters do not upgrade to it."""
    who = _checked(actor, reason, "abandon rollouts")
    _version_checked(version)
    if RolloutAction.objects.filter(version=version, kind=RolloutAction.Kind.ABANDON).exists():
        raise RolloutError(f"the rollout to {version} is abandoned already")
    # The runs it fails: every gate of the version still holding its cluster, also one an
    # attempt holds now or whose run has not started (each fails at its next poll).
    held = sorted(
        set(
            StepRun.objects.filter(
                type=GATE_TYPE,
                run__state__in=Run.ACTIVE,
                run__context__toKubernetesVersion=version,
            )
            .exclude(state__in=StepRun.FINISHED)
            .values_list("run_id", flat=True)
        )
    )
    return _act(RolloutAction.Kind.ABANDON, version, who, reason, held)
