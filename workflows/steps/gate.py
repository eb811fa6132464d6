"""`gate`: a wave of a rollout waits for its canaries (docs/rollouts.md).

At BeforeClusterUpgrade, the step is done once at least `count` (or `all`) clusters whose
labels match `matchLabels` have finished their upgrade to the same version: every
AfterClusterUpgrade run of theirs for that version succeeded (or was released), the last
of them at least `soakSeconds` ago. A canary's AfterClusterUpgrade run that failed or was
cancelled halts the gate: it waits, saying which cluster and workflow failed, until an
operator resumes the rollout (that failure no longer counts) or abandons it (the step
fails, so its run follows its template's onFailure) with `manage.py workflows rollout`
(workflows.operators.rollouts, recorded as RolloutAction rows).

`all` means every cluster matching `matchLabels` that hooksvc has a run of (it knows
clusters by their hook calls); the gate's own cluster never counts. One read of the
canaries' runs per poll; the hook path answers from the step's due_at as for any wait.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Set
from typing import Any

from django.conf import settings

from hooksvc.contract import wire
from workflows import clock, errors
from workflows.models import Run
from workflows.rollout_actions import RolloutAction
from workflows.steps import registry

#: The hook whose runs say a canary finished its upgrade and passed its checks.
CANARY_HOOK = "AfterClusterUpgrade"
#: The hook a gate holds: it is called once per upgrade with its target version.
GATE_HOOK = "BeforeClusterUpgrade"
WAITING = "waiting for its canaries"


def _check(params: dict[str, Any], hook: str) -> None:
    if hook != GATE_HOOK:
        raise registry.ParamError("", f"a gate holds {GATE_HOOK} only, not {hook}")
    if bool(params.get("count")) == bool(params.get("all")):
        raise registry.ParamError("count", "give either count or all: true")
    if not params.get("matchLabels"):
        raise registry.ParamError("matchLabels", "needs at least one label")


PARAMS = {
    #: The canaries: clusters with all these labels ({ring: canary}).
    "matchLabels": registry.Param(dict, required=True, values=registry.Param(str)),
    #: How many canaries must have passed ...
    "count": registry.Param(int, minimum=1),
    #: ... or every canary hooksvc knows.
    "all": registry.Param(bool),
    #: How long ago the last of a canary's AfterClusterUpgrade runs must have succeeded.
    "soakSeconds": registry.Param((int, float), default=0, minimum=0),
    #: How often it looks while canaries are still upgrading (or halted).
    "pollSeconds": registry.Param((int, float), default=30, minimum=1),
}


def _normal(params: Mapping[str, Any]) -> int:
    """How long a gate normally waits unchanged: its soak and a day for the canaries."""
    return int(float(params.get("soakSeconds") or 0)) + 86400


@dataclasses.dataclass(frozen=True)
class Canaries:
    """What a gate sees of its canaries for one version."""

    needed: int
    #: When each canary that finished passes its soak, earliest first.
    soaked_at: tuple[datetime.datetime, ...]
    #: The failed canary run that halts the gate (none: not halted).
    failed: Mapping[str, Any] | None
    abandoned: RolloutAction | None


def selector_text(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def target_version(context: Mapping[str, Any]) -> str:
    return str(context.get("toKubernetesVersion") or "")


def canaries(
    labels: Mapping[str, str],
    version: str,
    *,
    own_key: str,
    count: int | None,
    soak: float,
    ignore: Set[int] = frozenset(),
) -> Canaries:
    """The canaries of a gate for `version` (any cluster with `labels` but `own_key`);
    failed runs in `ignore` halt nothing (what a resume would set aside)."""
    abandoned = (
        RolloutAction.objects.filter(version=version, kind=RolloutAction.Kind.ABANDON)
        .order_by("created_at", "pk")
        .first()
    )
    resumed: set[int] = set(ignore)
    for ids in RolloutAction.objects.filter(
        version=version, kind=RolloutAction.Kind.RESUME
    ).values_list("runs", flat=True):
        resumed.update(int(i) for i in ids)
    runs = list(
        Run.objects.filter(
            hook=CANARY_HOOK,
            context__kubernetesVersion=version,
            context__cluster__labels__contains=dict(labels),
        )
        .exclude(cluster_key=own_key)
        .order_by("pk")
        .values(
            "pk",
            "cluster_key",
            "cluster_namespace",
            "cluster_name",
            "template_name",
            "state",
            "released",
            "finished_at",
        )
    )
    failed = next(
        (
            r
            for r in runs
            if r["state"] in (Run.State.FAILED, Run.State.CANCELLED)
            and not r["released"]
            and r["pk"] not in resumed
        ),
        None,
    )
    by_cluster: dict[str, list[Any]] = {}
    for r in runs:
        by_cluster.setdefault(r["cluster_key"], []).append(r)
    soaked_at = []
    for cluster_runs in by_cluster.values():
        done = all(r["state"] == Run.State.SUCCEEDED or r["released"] for r in cluster_runs)
        finished = [r["finished_at"] for r in cluster_runs if r["finished_at"] is not None]
        if done and finished:
            soaked_at.append(max(finished) + datetime.timedelta(seconds=soak))
    if count is None:
        known = (
            Run.objects.filter(context__cluster__labels__contains=dict(labels))
            .exclude(cluster_key=own_key)
            .values("cluster_key")
            .distinct()
            .count()
        )
        count = max(known, 1)
    return Canaries(count, tuple(sorted(soaked_at)), failed, abandoned)


def _command(action: str, version: str) -> str:
    return f'{settings.MANAGE_PY} workflows rollout {action} {version} --reason "<why>"'


def halted_message(failed: Mapping[str, Any], version: str) -> str:
    return (
        f"halts the rollout to {version}: canary {failed['cluster_namespace']}/"
        f"{failed['cluster_name']} failed workflow {failed['template_name']} "
        f"(run {failed['pk']}); resume it with `{_command('resume', version)}` "
        f"or abandon it with `{_command('abandon', version)}`"
    )


def waits_message(params: Mapping[str, Any], version: str) -> str:
    who = "all" if params.get("all") else str(params["count"])
    soak = params.get("soakSeconds") or 0
    soaked = f" and soak {soak:g} s" if soak else ""
    return (
        f"waits for {who} canaries {selector_text(params['matchLabels'])} to pass "
        f"{CANARY_HOOK} at {version}{soaked}"
    )


@registry.step_type(
    "gate",
    params=PARAMS,
    check=_check,
    waiting_message=WAITING,
    says_own_wait=True,
    # Its message stays the same while canaries upgrade and soak: a day past the soak
    # without passing is a rollout stuck (docs/stalls.md). It fails after 14 days unless
    # its template says otherwise.
    default_timeout_seconds=14 * 86400,
    stall_seconds=_normal,
    # A few reads of rows.
    call_timeout_seconds=30,
)
def gate(ctx: registry.StepContext) -> registry.Outcome:
    """Waits until enough canary clusters passed their upgrade to the same version."""
    now = ctx.now or clock.now()
    version = target_version(ctx.run_context)
    if not version:
        raise errors.PermanentError(f"a gate needs the upgrade's target version ({GATE_HOOK})")
    seen = canaries(
        ctx.params["matchLabels"],
        version,
        own_key=wire.cluster_key(
            str(ctx.cluster.get("uid") or ""),
            str(ctx.cluster.get("namespace") or ""),
            str(ctx.cluster.get("name") or ""),
        ),
        count=None if ctx.params.get("all") else int(ctx.params["count"]),
        soak=float(ctx.params.get("soakSeconds") or 0),
    )
    poll = float(ctx.params.get("pollSeconds") or 30)
    if seen.abandoned is not None:
        raise errors.PermanentError(
            f"the rollout to {version} was abandoned by {seen.abandoned.actor}: "
            f"{seen.abandoned.reason}"
        )
    if seen.failed is not None:
        return registry.Poll(after=poll, message=halted_message(seen.failed, version))
    message = waits_message(ctx.params, version)
    if len(seen.soaked_at) >= seen.needed:
        passes_at = seen.soaked_at[seen.needed - 1]
        if passes_at <= now:
            return registry.Done({"version": version, "canaries": seen.needed})
        wait = (passes_at - now).total_seconds()
        return registry.Poll(after=min(wait, poll), message=message, on_time=wait <= poll)
    return registry.Poll(after=poll, message=message)
