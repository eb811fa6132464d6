"""Operator actions on many runs at once: approve, retry, release or cancel, with one reason.

Each run is acted on exactly as the single action does (`workflows.operators.actions`,
recorded per run with who and why, refused where the actor may not act), in a transaction
of its own: one run that refuses does not undo the others, and the outcome is reported run
by run.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable

from django.db import transaction
from django.db.models import Q, QuerySet

from workflows.models import Run, StepRun
from workflows.operators import access, actions, fleet, reasons, states

#: The bulk actions, with the words the admin shows for them.
ACTIONS = {
    "approve": "Approve",
    "retry": "Retry failed steps",
    "release": "Release the hold",
    "cancel": "Cancel",
}
#: At most this many runs in one bulk action (a filter can find a whole fleet).
LIMIT = 1000


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one run of a bulk action did: `ok`, and a sentence for the operator."""

    run_id: int
    cluster: str
    ok: bool
    message: str
    #: False when the run was already as the action would leave it (actions.AlreadyDone).
    changed: bool = True


def applies(action: str) -> Q:
    """The runs `action` can act on in their current state (a filter's scope uses it)."""
    if action == "approve":
        return states.where(states.State.AWAITING_APPROVAL)
    if action == "retry":
        return Q(state__in=[Run.State.FAILED, Run.State.CANCELLED])
    if action == "release":
        return Q(released=False) & ~Q(state=Run.State.SUCCEEDED)
    if action == "cancel":
        return Q(state__in=Run.ACTIVE)
    raise ValueError(f"unknown bulk action {action!r}; one of: {', '.join(ACTIONS)}")


def by_filter(
    action: str, filters: fleet.FleetFilter, *, actor: access.Actor, now: datetime.datetime
) -> QuerySet[Run]:
    """The runs a bulk `action` by filter acts on (the admin's "every run the filter finds"
    and the API's `filter`): those on the filter's view of the fleet, all pages, that the
    action applies to now, where `actor` may take it. FilterError for a malformed filter."""
    return (
        fleet.shown_runs(filters, actor=actor, now=now)
        .filter(applies(action))
        .filter(actor.where(access.ACTIONS[action]))
    )


def waiting_steps(run_id: int, actor: access.Actor) -> list[str]:
    """The steps of a run `actor` sees that wait for a person now, in order."""
    return list(
        StepRun.objects.filter(run_id=run_id, waits_for_person=True, state=StepRun.State.WAITING)
        .filter(actor.where(access.Permission.VIEW, "run__cluster_namespace"))
        .order_by("position")
        .values_list("name", flat=True)
    )


def _one(action: str, run_id: int, *, actor: access.Actor, reason: str) -> str:
    if action == "approve":
        names = waiting_steps(run_id, actor)
        if not names:
            raise actions.ActionError(f"run {run_id} is not waiting for approval")
        for name in names:
            actions.step_approve(run_id=run_id, step_name=name, actor=actor, reason=reason)
        return f"approved {', '.join(names)}"
    if action == "retry":
        actions.run_retry(run_id=run_id, actor=actor, reason=reason)
        return "retrying its failed steps"
    if action == "release":
        actions.run_release(run_id=run_id, actor=actor, reason=reason)
        return "released"
    actions.run_cancel(run_id=run_id, actor=actor, reason=reason)
    return "cancelled"


def perform(
    action: str, run_ids: Iterable[int], *, actor: str | access.Actor, reason: str
) -> list[Outcome]:
    """Act on each run in turn, each in its own transaction; report every run's outcome."""
    if action not in ACTIONS:
        raise ValueError(f"unknown bulk action {action!r}; one of: {', '.join(ACTIONS)}")
    who = access.actor_of(actor)
    if not who.name.strip() or not reason.strip():
        raise actions.ActionError("a bulk action needs the operator's name and a reason")
    wrong = reasons.problem(reason)
    if wrong:
        raise actions.ActionError(wrong)
    ids = list(dict.fromkeys(run_ids))
    if len(ids) > LIMIT:
        raise actions.ActionError(f"{len(ids)} runs chosen; at most {LIMIT} at once")
    visible = Run.objects.filter(Q(pk__in=ids) & who.where(access.Permission.VIEW))
    names = {
        pk: f"{namespace}/{name}"
        for pk, namespace, name in visible.values_list("pk", "cluster_namespace", "cluster_name")
    }
    outcomes = []
    for run_id in ids:
        cluster = names.get(run_id, "-")
        try:
            # Durable: each run's action commits on its own, never inside a caller's.
            with transaction.atomic(durable=True):
                message = _one(action, run_id, actor=who, reason=reason)
        except actions.AlreadyDone as exc:
            outcomes.append(Outcome(run_id, cluster, True, str(exc), changed=False))
        except (actions.ActionError, access.Denied) as exc:
            outcomes.append(Outcome(run_id, cluster, False, str(exc)))
        else:
            outcomes.append(Outcome(run_id, cluster, True, message))
    return outcomes
