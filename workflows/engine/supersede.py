"""A new desired spec of a Machine supersedes the UpdateMachine runs of its earlier ones.

CAPI calls UpdateMachine with the Machine's desired spec of the moment (the run's moment is
`<machine>@<digest>`, hooksvc.contract.machines.update_moment); once that spec changed,
nothing asks about the earlier update again, and its run going on beside the new one would
work on the same Node twice at once. So when a run of a new desired spec is scheduled,
the Machine's earlier runs that are still active are cancelled, their unfinished steps
cancelled as an operator's cancel does (so a step that acted is cleaned up,
workflows.engine.cleanups), and the cancel recorded with actor `hooksvc` and the run that
superseded them.

Called after each of the new run's schedules commits (workflows.engine.scheduling: one
indexed query when there is nothing to cancel, so a supersede a dead worker cut short is
done at the run's next advance): each earlier run is locked in a transaction of its own,
never while the new run's row is held (a finishing run locks its cluster's pending runs;
the two orders could deadlock).
"""

from __future__ import annotations

import logging

from django.db import transaction

from workflows import clock
from workflows.engine import lifecycle, messages, observe, stepstate, transitions
from workflows.models import Run, StepRun

logger = logging.getLogger(__name__)

HOOK = "UpdateMachine"
#: Who the cancel's RunEvent names.
ACTOR = "hooksvc"


def applies(run: Run) -> bool:
    """Whether `run` is one that may supersede others: an UpdateMachine run's."""
    return run.hook == HOOK and "@" in run.moment


def earlier(run: Run) -> list[int]:
    """The Machine's runs of other desired specs, made before `run` and still active."""
    machine = run.moment.rpartition("@")[0]
    return list(
        Run.objects.filter(
            hook=HOOK,
            cluster_key=run.cluster_key,
            moment__startswith=f"{machine}@",
            state__in=Run.ACTIVE,
            pk__lt=run.pk,
        )
        .exclude(moment=run.moment)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def supersede(run_id: int) -> list[int]:
    """Cancel the runs `run_id` supersedes; the ids of those it cancelled."""
    run = Run.objects.only("pk", "hook", "cluster_key", "moment").filter(pk=run_id).first()
    if run is None or not applies(run):
        return []
    return [pk for pk in earlier(run) if _cancel(pk, by=run)]


def _cancel(run_id: int, *, by: Run) -> bool:
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.is_finished:
            return False  # it ended meanwhile, or an operator cancelled it
        now = clock.now()
        for step in (
            run.steps.exclude(state__in=StepRun.FINISHED).select_for_update().order_by("id")
        ):
            stepstate.apply(step, lifecycle.cancelled(step, now))
        machine = f"{run.cluster_namespace}/{by.moment.rpartition('@')[0]}"
        reason = messages.run_superseded_reason(by.pk, machine)
        transitions.run_move(
            run,
            Run.State.CANCELLED,
            allowed_from=Run.ACTIVE,
            message=messages.run_superseded(run.template_name, by.pk),
            actor=ACTOR,
            reason=reason,
        )
        transitions.action_record(run, "cancel", actor=ACTOR, reason=reason)
    logger.info(
        "run superseded by a new desired spec of its Machine",
        extra={"action": "run_superseded", "by_run": by.pk, **observe.log_fields(run)},
    )
    return True
