"""`gate`: a wave of a rollout waits for its canaries (docs/rollouts.md).

At BeforeClusterUpgrade, the step is done once at least `count` (or `all`) clusters whose
labels match `matchLabels` have finished their upgrade to the same version: every
AfterClusterUpgrade run of theirs for that version succeeded (or was released), the last
of them at least `soakSeconds` ago. A canary's AfterClusterUpgrade run that failed or was
cancelled halts the gate: it waits, saying which cluster and workflow failed, until an
operator resumes the rollout (that failure no longer counts) or abandons it (the step
fails, so its run follows its template's onFailure) with `manage.py workflows rollout`
(workflows.operators.rollouts, recorded as RolloutAction rows).

Which clusters are the canaries: those the Cluster watcher (workflows.controllers.watcher)
recorded with the labels now (KnownCluster), with a topology (CAPI calls hooks for no
other) and not being deleted; a deleted Cluster is no canary any more, a recreated one
(a new uid) is a new canary with no runs yet, a relabelled one leaves or joins. Without a
watcher (it has no record of the gate's own cluster), the canaries are the clusters whose
runs carried the labels (hooksvc knows them by their hook calls). A failed run of a
cluster that carried the labels when it ran halts the gate either way: a failure says
something of the version, whatever became of its cluster. The gate's own cluster never
counts. A few reads per poll; the hook path answers from the step's due_at as for any wait.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping, Set
from typing import Any

from django.conf import settings
from django.db.models import Q

from hooksvc.contract import wire
from workflows import clock, durations, errors
from workflows.models import KnownCluster, Run
from workflows.rollout_actions import RolloutAction
from workflows.steps import registry, windows

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
    #: ... or every canary there is (docs/rollouts.md: the live fleet).
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
    #: The canaries' keys as the watcher knows the fleet now (None: no watcher, they are
    #: known by their runs).
    live: frozenset[str] | None = None

    @property
    def too_few(self) -> int | None:
        """How many canaries there are, when fewer than needed (None: enough, or unknown)."""
        if self.live is None or len(self.live) >= self.needed:
            return None
        return len(self.live)


def selector_text(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def target_version(context: Mapping[str, Any]) -> str:
    return str(context.get("toKubernetesVersion") or "")


def live_canaries(labels: Mapping[str, str], own_key: str) -> frozenset[str] | None:
    """The keys of the Clusters with `labels` now, with a topology and not being deleted,
    as the watcher recorded them; None when it has no record of `own_key` (no watcher)."""
    if not KnownCluster.objects.filter(key=own_key).exists():
        return None
    keys = (
        KnownCluster.objects.filter(
            cluster__metadata__labels__contains=dict(labels),
            cluster__spec__topology__has_key="classRef",
        )
        .exclude(cluster__metadata__has_key="deletionTimestamp")
        .exclude(key=own_key)
        .values_list("key", flat=True)
    )
    return frozenset(keys)


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
    live = live_canaries(labels, own_key)
    carried = Q(context__cluster__labels__contains=dict(labels))
    runs = list(
        Run.objects.filter(
            carried | Q(cluster_key__in=live or ()),
            hook=CANARY_HOOK,
            context__kubernetesVersion=version,
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
        if live is None or r["cluster_key"] in live:
            by_cluster.setdefault(r["cluster_key"], []).append(r)
    soaked_at = []
    for cluster_runs in by_cluster.values():
        done = all(r["state"] == Run.State.SUCCEEDED or r["released"] for r in cluster_runs)
        finished = [r["finished_at"] for r in cluster_runs if r["finished_at"] is not None]
        if done and finished:
            soaked_at.append(max(finished) + datetime.timedelta(seconds=soak))
    if count is None:
        if live is not None:
            known = len(live)
        else:
            known = (
                Run.objects.filter(carried)
                .exclude(cluster_key=own_key)
                .values("cluster_key")
                .distinct()
                .count()
            )
        # No canary at all is no pass: a selector that matches nothing waits, and says so.
        count = max(known, 1)
    return Canaries(count, tuple(sorted(soaked_at)), failed, abandoned, live)


def _command(action: str, version: str) -> str:
    return f'{settings.MANAGE_PY} workflows rollout {action} {version} --reason "<why>"'


def canary_named(failed: Mapping[str, Any], shown: Callable[[str], bool]) -> str:
    """The failed canary as a reader sees it: by name if `shown` lets them see its
    namespace, else only that it is in another one (invariant 13: what a role may not see,
    no message carries). The one place a gate's message names another cluster."""
    if shown(str(failed["cluster_namespace"])):
        return (
            f"canary {failed['cluster_namespace']}/{failed['cluster_name']} failed workflow "
            f"{failed['template_name']} (run {failed['pk']})"
        )
    return f"a canary in another namespace failed workflow {failed['template_name']}"


def halted_message(failed: Mapping[str, Any], version: str, *, shown: Callable[[str], bool]) -> str:
    """What halts the rollout, for a reader who may see the namespaces `shown` admits."""
    return (
        f"halts the rollout to {version}: {canary_named(failed, shown)}; "
        f"resume it with `{_command('resume', version)}` "
        f"or abandon it with `{_command('abandon', version)}`"
    )


def abandoned_message(action: RolloutAction, version: str, run_id: int) -> str:
    """Why the gate failed, and the ways on that work: a retry fails again (an abandon is
    final for its version), so it names setting the version back and releasing the run."""
    return (
        f"the rollout to {version} was abandoned by {action.actor}: {action.reason}; "
        f"set the Cluster's version back (a new target version is a new moment), "
        f"or let it upgrade anyway with `{settings.MANAGE_PY} workflows release {run_id} "
        f'--reason "<why>"`'
    )


def soak_end(at: datetime.datetime) -> str:
    """When a soak ends, as the window step names its opening: "Sat 2026-11-28 14:05 UTC",
    the minute rounded up (never earlier than it ends)."""
    at = at.astimezone(datetime.UTC)
    if at.second or at.microsecond:
        at = at.replace(second=0, microsecond=0) + datetime.timedelta(minutes=1)
    return f"{windows.DAYS[at.weekday()]} {at:%Y-%m-%d %H:%M} UTC"


def waits_message(
    params: Mapping[str, Any],
    version: str,
    *,
    soaked_at: datetime.datetime | None = None,
    too_few: int | None = None,
) -> str:
    """What a waiting gate says: deterministic while nothing changes; once enough canaries
    passed, the end of their soak (`soaked_at`) instead of the soak's length; `too_few`:
    how many canaries there are, when fewer than it needs (it cannot pass so)."""
    who = (
        "all canaries"
        if params.get("all")
        else durations.count(int(params["count"]), "canary", "canaries")
    )
    soak = params.get("soakSeconds") or 0
    soaked = f" and soak {soak:g} s" if soak else ""
    if soaked_at is not None:
        soaked = f" and soak until {soak_end(soaked_at)}"
    said = (
        f"waits for {who} {selector_text(params['matchLabels'])} to pass "
        f"{CANARY_HOOK} at {version}{soaked}"
    )
    if too_few == 0:
        said += " (no Cluster has those labels now)"
    elif too_few is not None:
        have = "has" if too_few == 1 else "have"
        said += f" (only {durations.count(too_few, 'Cluster')} {have} those labels now)"
    return said


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
        raise errors.PermanentError(abandoned_message(seen.abandoned, version, ctx.run_id))
    if seen.failed is not None:
        # The run's message reaches its Cluster's conditions and everyone who sees the run:
        # it names a canary of the run's own namespace only.
        own_namespace = str(ctx.cluster.get("namespace") or "")
        message = halted_message(seen.failed, version, shown=lambda ns: ns == own_namespace)
        return registry.Poll(after=poll, message=message)
    if len(seen.soaked_at) >= seen.needed:
        passes_at = seen.soaked_at[seen.needed - 1]
        if passes_at <= now:
            return registry.Done({"version": version, "canaries": seen.needed})
        wait = (passes_at - now).total_seconds()
        message = waits_message(ctx.params, version, soaked_at=passes_at)
        return registry.Poll(after=min(wait, poll), message=message, on_time=wait <= poll)
    message = waits_message(ctx.params, version, too_few=seen.too_few)
    return registry.Poll(after=poll, message=message)
