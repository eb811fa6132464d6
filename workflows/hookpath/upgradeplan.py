"""GenerateUpgradePlan: the chain of control plane and worker versions an upgrade policy
allows. Pure but for reading the policies; `workflows preview --upgrade-to` shows the same.

The plan obeys the rules CAPI checks in DefaultAndValidateUpgradePlans
(kubernetes-sigs/cluster-api exp/topology/desiredstate/upgrade_plan.go): the control plane
goes through one version of every minor after its own, each greater than the one before,
and ends at the target; the workers' versions are the control plane's current version or
steps of its plan, increasing, at most three minors apart (the skew policy), ending at the
target, and empty when there are no workers or they are there already. `Minimal` workers
follow CAPI's own default (a step every third minor, then the target); `EveryMinor` take
every step they have not reached. A target the policy cannot reach is a `PlanError` whose
message says why; the hook answers it as a Failure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hooksvc.contract import machines, semver
from workflows.definitions import policies
from workflows.hookpath import answers

#: Kubernetes' version skew policy: kubelets may be up to three minors older than the
#: API server (CAPI's workers check: `targetMinor-currentMinor > 3` is refused).
MAX_WORKER_SKEW = 3


class PlanError(Exception):
    """The policy cannot reach the target; the message is fixed for given inputs."""


@dataclasses.dataclass(frozen=True)
class Plan:
    policy: str
    control_plane: tuple[str, ...]
    workers: tuple[str, ...]


def _newest(versions: Sequence[tuple[semver.Version, str]]) -> str:
    best = versions[0]
    for candidate in versions[1:]:
        if semver.compare(candidate[0], best[0]) == 1:
            best = candidate
    return best[1]


def control_plane_plan(
    policy: policies.UpgradePolicy,
    current: semver.Version,
    target: semver.Version,
    target_text: str,
) -> list[str]:
    """One version per minor after `current`'s, ending at the target."""
    order = semver.compare(target, current)
    if order == 0:
        return []
    if order == -1:
        raise PlanError(
            f"{target.v} is older than the control plane's {current.v}; an upgrade plan only"
            " goes forward"
        )
    if target.major != current.major:
        raise PlanError(
            f"upgrade policy {policy.name} cannot plan from {current.v} to another major,"
            f" {target.v}"
        )
    skipped = {semver.parse(v) for v in policy.skip}
    if any(semver.compare(target, s) == 0 for s in skipped):
        raise PlanError(f"upgrade policy {policy.name} skips {target.v}")
    parsed = [(semver.parse(text), text) for text in policy.versions]
    allowed = [(v, t) for v, t in parsed if not any(semver.compare(v, s) == 0 for s in skipped)]
    if not any(semver.compare(target, v) == 0 for v, _ in allowed):
        raise PlanError(f"{target.v} is not among the versions upgrade policy {policy.name} allows")
    plan: list[str] = []
    for minor in range(current.minor + 1, target.minor):
        pinned = policy.pins.get(f"v{target.major}.{minor}")
        if pinned:
            plan.append(pinned)
            continue
        of_minor = [(v, t) for v, t in allowed if (v.major, v.minor) == (target.major, minor)]
        if not of_minor:
            raise PlanError(
                f"upgrade policy {policy.name} allows no version of v{target.major}.{minor},"
                f" which the upgrade from {current.v} to {target.v} must go through"
            )
        plan.append(_newest(of_minor))
    plan.append(target_text)
    return plan


def workers_plan(
    policy: policies.UpgradePolicy,
    *,
    control_plane: str,
    plan: Sequence[str],
    workers: semver.Version | None,
    target: semver.Version,
    target_text: str,
) -> list[str]:
    """The workers' steps: empty without workers or when they are at the target."""
    if workers is None or semver.compare(workers, target) == 0:
        return []
    chain = [control_plane, *plan]
    if policy.workers == "EveryMinor":
        steps = [v for v in chain if semver.compare(semver.parse(v), workers) == 1]
    else:
        # CAPI's default (DefaultAndValidateUpgradePlans): a step at every third minor.
        by_minor = {semver.parse(v).minor: v for v in chain}
        steps = []
        for i in range(1, target.minor - workers.minor):
            if i % MAX_WORKER_SKEW == 0:
                minor = workers.minor + i
                if minor not in by_minor:
                    raise PlanError(_lagging(workers, chain[0]))
                steps.append(by_minor[minor])
        if not steps or steps[-1] != target_text:
            steps.append(target_text)
    previous = workers
    for step in steps:
        parsed = semver.parse(step)
        if parsed.minor - previous.minor > MAX_WORKER_SKEW:
            raise PlanError(_lagging(workers, chain[0]))
        previous = parsed
    return steps


def _lagging(workers: semver.Version, control_plane: str) -> str:
    return (
        f"workers at {workers.v} are more than {MAX_WORKER_SKEW} minors behind the control"
        f" plane's {semver.parse(control_plane).v}: no plan keeps them within the skew policy"
    )


def plan(
    policy: policies.UpgradePolicy,
    *,
    control_plane: str,
    workers: str,
    target: str,
) -> Plan:
    """The plan from `control_plane` (and `workers`, "" for none) to `target`."""
    current = semver.parse(control_plane)
    goal = semver.parse(target)
    steps = control_plane_plan(policy, current, goal, target)
    worker_steps = workers_plan(
        policy,
        control_plane=control_plane,
        plan=steps,
        workers=semver.parse(workers) if workers else None,
        target=goal,
        target_text=target,
    )
    return Plan(policy=policy.name, control_plane=tuple(steps), workers=tuple(worker_steps))


MSG_NO_POLICY = "no upgrade policy matches cluster {cluster}"
MSG_SEVERAL = (
    "cluster {cluster} matches several upgrade policies ({names}); make their selectors disjoint"
)


def matching(
    found: Sequence[policies.UpgradePolicy],
    *,
    cluster: str,
    namespace: str,
    labels: dict[str, str],
    cluster_class: str,
) -> policies.UpgradePolicy:
    """The one policy for `cluster` (namespace/name); PlanError when none or several match."""
    chosen = [p for p in found if p.matches(namespace, labels, cluster_class)]
    if not chosen:
        raise PlanError(MSG_NO_POLICY.format(cluster=cluster))
    if len(chosen) > 1:
        raise PlanError(
            MSG_SEVERAL.format(cluster=cluster, names=", ".join(p.name for p in chosen))
        )
    return chosen[0]


def answer(call: machines.UpgradePlanCall) -> tuple[answers.Answer, dict[str, object]]:
    """Success with the plan, or Failure saying why the policy cannot reach the target."""
    cluster = call.cluster
    try:
        policy = matching(
            policies.upgrade_policies(),
            cluster=f"{cluster.namespace}/{cluster.name}",
            namespace=cluster.namespace,
            labels=cluster.labels,
            cluster_class=cluster.class_name,
        )
        found = plan(
            policy,
            control_plane=call.from_control_plane_text,
            workers=call.from_workers_text,
            target=call.to_text,
        )
    except PlanError as exc:
        return answers.not_served(str(exc)), {}
    fields: dict[str, object] = {
        "controlPlaneUpgrades": [{"version": v} for v in found.control_plane],
        "workersUpgrades": [{"version": v} for v in found.workers],
    }
    return answers.PROCEED, fields
