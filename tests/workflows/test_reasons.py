"""A reason is the operator's own words: a hint's placeholder is refused everywhere a reason is
taken (the CLI, the admin's forms, bulk actions, and the service functions behind them).

The hints hooksvc prints end in `--reason "<why>"` (workflows/engine/messages.py): pasted as
written, the command used to record "<why>" as the reason. Each refusal says what to write
instead and leaves nothing recorded. That a hint pasted as written fails this way from a
shell is tests/workflows/test_hints.py's.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from tests.workflows.runs import make_run
from workflows.models import Run, RunEvent, StepRun
from workflows.operators import actions, bulk, reasons

pytestmark = pytest.mark.django_db

S = StepRun.State
REFUSED = "is a hint's placeholder, not a reason: replace it with why you do this"


@pytest.mark.parametrize(
    "reason", ["<why>", " <why> ", "<WHY>", "< why >", "<reason>", "<ticket>", "<why>: CAB-1"]
)
def test_a_placeholder_is_not_a_reason(reason: str) -> None:
    assert REFUSED in reasons.problem(reason)


@pytest.mark.parametrize(
    "reason", ["CAB-1234 approved the window", "why not: INC-9", "a <b> c", "ticket <OPS-7> ok"]
)
def test_words_of_ones_own_are_a_reason(reason: str) -> None:
    assert reasons.problem(reason) == ""


def test_a_blank_reason_says_one_is_needed() -> None:
    assert reasons.problem("  ") == "a reason is needed: say why you do this"


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        ("retry", ["--step", "backup"]),
        ("release", []),
        ("cancel", []),
        ("skip", ["--step", "backup"]),
    ],
)
def test_the_cli_refuses_the_hints_placeholder_and_records_nothing(
    command: str, extra: list[str]
) -> None:
    run = make_run(state=Run.State.FAILED, steps=(("backup", "noop", S.FAILED),))
    with pytest.raises(CommandError) as caught:
        call_command(
            "workflows", command, str(run.pk), *extra, "--reason", "<why>", stdout=io.StringIO()
        )
    assert str(caught.value) == (
        "the reason '<why>' is a hint's placeholder, not a reason: replace it with why you do "
        "this (a ticket, a change window, who agreed)"
    )
    assert caught.value.returncode == 1
    assert not RunEvent.objects.filter(run=run).exists()
    run.refresh_from_db()
    assert (run.state, run.released) == (Run.State.FAILED, False)


def test_the_service_functions_refuse_it_too() -> None:
    """What the CLI, the admin and the REST API all call."""
    run = make_run(steps=(("approve", "approval", S.WAITING),))
    with pytest.raises(actions.ActionError, match=REFUSED):
        actions.step_approve(run_id=run.pk, step_name="approve", actor="ops:ann", reason="<why>")
    with pytest.raises(actions.ActionError, match=REFUSED):
        bulk.perform("approve", [run.pk], actor="ops:ann", reason="<why>")
    assert not RunEvent.objects.exists()


def test_the_admins_confirmation_refuses_it_with_the_form_error(admin_client: Client) -> None:
    run = make_run(state=Run.State.FAILED, steps=(("backup", "noop", S.FAILED),))
    url = f"/admin/workflows/run/{run.pk}/action/release/"
    page = admin_client.post(url, {"reason": "<why>"}).content.decode()
    assert "the reason &#x27;&lt;why&gt;&#x27; is a hint&#x27;s placeholder" in page
    assert not RunEvent.objects.exists()
    bulk_page = admin_client.post(
        "/admin/fleet/bulk/",
        {
            "action": "release",
            "scope": "selected",
            "run": [run.pk],
            "confirmed": "1",
            "reason": "<why>",
        },
    ).content.decode()
    assert "is a hint&#x27;s placeholder" in bulk_page
    assert not RunEvent.objects.exists()
    run.refresh_from_db()
    assert not run.released
