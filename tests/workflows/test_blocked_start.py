"""A run that waits to start behind a failed workflow (waitFor) waits quietly for a person.

docs/monitoring.md promises that an idle hooksvc is silent. A run whose `waitFor` workflow failed or
was cancelled used to look again every START_RECHECK_SECONDS, so the reconciler re-enqueued
it, and logged "re-enqueued overdue work", every 15-30 s for as long as nobody acted. Only an
operator's action on the failed run changes its verdict (workflows.engine.scheduling), so the
run now has no wake-up of its own: it says what blocks it (and the commands that move it),
the reconciler leaves it alone, and retrying, skipping past or releasing the failed run wakes
it (workflows.operators.actions), due at once so that the reconciler sends it if that message
is lost. A run behind a workflow that is still running looks again as before. The engine's
tasks are called directly here (their messages recorded, its clock held); that the printed
commands run and the run then starts, with a real worker, is tests/workflows/test_hints.py's.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.workflows.runs import make_run
from workflows.engine import reconciler, scheduling
from workflows.models import Run, StepRun
from workflows.operators import actions

pytestmark = pytest.mark.django_db(transaction=True)

S = StepRun.State


def behind(first_state: str) -> tuple[Run, Run]:
    """`install-cni` in `first_state`, and `install-addons` waiting for it, advanced once."""
    first = make_run(template="install-cni", state=first_state, steps=(("cni", "noop", S.FAILED),))
    second = make_run(template="install-addons", state=Run.State.PENDING)
    Run.objects.filter(pk=second.pk).update(
        spec={
            **second.spec,
            "waitFor": ["install-cni"],
            "steps": [{"name": "ok", "type": "noop", "with": {}, "dependsOn": []}],
        }
    )
    scheduling.advance(second.pk)
    second.refresh_from_db()
    return first, second


@pytest.mark.parametrize("first_state", [Run.State.FAILED, Run.State.CANCELLED])
def test_it_says_what_blocks_it_and_has_no_wake_up_of_its_own(
    sent: list[tuple[str, Any]], now: list[datetime.datetime], first_state: str
) -> None:
    first, second = behind(first_state)
    assert second.state == Run.State.PENDING
    assert second.message.startswith(
        f"workflow install-addons is waiting for workflow install-cni (run {first.pk}), "
        f"which {first_state}; retry it with `"
    )
    assert second.wake_at is None


def test_the_reconciler_leaves_it_alone_while_nobody_acts(
    sent: list[tuple[str, Any]], now: list[datetime.datetime]
) -> None:
    behind(Run.State.FAILED)
    sent.clear()
    for minutes in (1, 5, 30, 24 * 60):
        now[0] += datetime.timedelta(minutes=minutes)
        assert reconciler.reconcile() == reconciler.ReconcileReport(runs=0, steps=0)
    assert sent == []


@pytest.mark.parametrize("how", ["release", "retry", "skip"])
def test_an_action_on_the_failed_run_wakes_it_due_at_once(
    sent: list[tuple[str, Any]], now: list[datetime.datetime], how: str
) -> None:
    first, second = behind(Run.State.FAILED)
    sent.clear()
    if how == "release":
        actions.run_release(run_id=first.pk, actor="ops:ann", reason="CNI installed by hand")
    elif how == "retry":
        actions.run_retry(run_id=first.pk, actor="ops:ann", reason="registry is back")
    else:
        actions.step_skip(run_id=first.pk, step_name="cni", actor="ops:ann", reason="by hand")
    assert ("advance", second.pk) in sent
    second.refresh_from_db()
    assert second.wake_at == now[0], "due now: the reconciler sends it if the message is lost"
    scheduling.advance(second.pk)
    second.refresh_from_db()
    if how == "retry":
        # The failed run goes on again: wait for it, looking again as any waiting run does.
        assert (
            second.message
            == "workflow install-addons is waiting for workflow install-cni to finish"
        )
        assert second.wake_at == now[0] + scheduling.START_RECHECK
    else:
        # Released, or its failed run ended at once (the skip left no step unfinished, so
        # it succeeded in the skip's transaction): it started, and its one inline step ran
        # to the end in the same advance.
        assert (second.state, second.started_at is not None) == (Run.State.SUCCEEDED, True)


def test_a_lost_wake_up_is_found_by_the_reconciler(
    sent: list[tuple[str, Any]], now: list[datetime.datetime]
) -> None:
    first, second = behind(Run.State.FAILED)
    actions.run_release(run_id=first.pk, actor="ops:ann", reason="done by hand")
    sent.clear()  # the broker lost the message
    now[0] += datetime.timedelta(minutes=5)
    assert reconciler.reconcile().runs == 1
    assert ("advance", second.pk) in sent
