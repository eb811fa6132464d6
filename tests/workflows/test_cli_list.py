"""`manage.py workflows list`: honest states in `--state`, every moment in `--hook`, and the
STEP, WHY and AGE columns of a table that fits 120 columns.

Runs are made with the ORM in the states the tests need (tests/workflows/runs.py); the
display states come from workflows/operators/states.py, as in the admin.
"""

from __future__ import annotations

import datetime
import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.workflows.runs import make_run
from workflows.models import Run, StepRun

pytestmark = pytest.mark.django_db

S = StepRun.State


def cli(*args: str) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out)
    return out.getvalue()


def listed(*args: str) -> list[dict[str, Any]]:
    return list(json.loads(cli("list", *args, "-o", "json")))


def awaiting(cluster: str = "prod/c1", asks: str = "CAB ticket approved?") -> Run:
    run = make_run(
        cluster=cluster,
        steps=(("backup", "noop", S.SUCCEEDED), ("approve", "approval", S.WAITING)),
    )
    run.steps.filter(name="approve").update(
        params={"message": asks}, message="waiting for approval"
    )
    return run


def test_state_filter_takes_the_honest_states() -> None:
    waiting = awaiting()
    running = make_run(cluster="prod/c2", steps=(("backup", "wait", S.WAITING),))
    failed = make_run(cluster="prod/c3", state=Run.State.FAILED)
    released = make_run(cluster="prod/c4", state=Run.State.FAILED)
    Run.objects.filter(pk=released.pk).update(released=True)

    def ids(state: str) -> set[int]:
        return {r["id"] for r in listed("--state", state)}

    assert ids("awaiting_approval") == {waiting.pk}
    assert ids("running") == {running.pk}
    assert ids("failed") == {failed.pk}
    assert ids("released") == {released.pk}
    assert {r["id"]: r["displayState"] for r in listed()} == {
        waiting.pk: "awaiting_approval",
        running.pk: "running",
        failed.pk: "failed",
        released.pk: "released",
    }


def test_an_unknown_state_names_the_states() -> None:
    with pytest.raises(CommandError, match=r"invalid choice: 'waiting'.*'awaiting_approval'"):
        cli("list", "--state", "waiting")


def test_hook_filter_takes_cluster_deleted() -> None:
    gone = make_run(template="dns-cleanup", hook="ClusterDeleted", moment="")
    make_run(template="backup")
    assert [r["id"] for r in listed("--hook", "ClusterDeleted")] == [gone.pk]


def test_table_shows_the_step_why_and_age() -> None:
    waiting = awaiting(asks="Is CAB-4711 approved for prod/c1?")
    failed = make_run(
        cluster="prod/c2", state=Run.State.FAILED, steps=(("snapshot", "backup_pvs", S.FAILED),)
    )
    polling = make_run(cluster="prod/c3", steps=(("conformance", "conformance", S.WAITING),))
    polling.steps.update(message="sonobuoy: 112 of 402 tests done")
    now = timezone.now()
    Run.objects.filter(pk=waiting.pk).update(created_at=now - datetime.timedelta(minutes=12))
    Run.objects.filter(pk=failed.pk).update(created_at=now - datetime.timedelta(hours=3, minutes=5))
    Run.objects.filter(pk=polling.pk).update(created_at=now - datetime.timedelta(days=2, hours=4))

    lines = cli("list").splitlines()
    header = lines[0]
    assert header.split() == ["ID", "STATE", "TEMPLATE", "CLUSTER", "STEP", "WHY", "AGE"]
    by_id = {int(line.split()[0]): line for line in lines[1:]}
    step, why, age = header.index("STEP"), header.index("WHY"), header.index("AGE")

    def cells(run: Run) -> tuple[str, str, str]:
        line = by_id[run.pk]
        return line[step:why].strip(), line[why:age].strip(), line[age:].strip()

    assert cells(waiting) == ("approve", "Is CAB-4711 approved for prod/c1?", "12 min")
    assert cells(failed) == ("snapshot", "it broke", "3 h 05 min")
    assert cells(polling) == ("conformance", "sonobuoy: 112 of 402 tests done", "2 d 4 h")
    assert by_id[waiting.pk].split()[1] == "awaiting_approval"


def test_table_fits_120_columns_by_cutting_why_and_wide_cuts_nothing() -> None:
    long_why = "the storage API answered 503 Service Unavailable " * 4
    run = make_run(
        template="backup-persistent-volumes-before-the-upgrade",
        cluster="team-payments-production/payments-eu-west-1-blue",
        state=Run.State.FAILED,
        steps=(("snapshot-persistent-volumes", "backup_pvs", S.FAILED),),
    )
    run.steps.update(message=long_why.strip())

    table = cli("list").splitlines()
    assert max(len(line) for line in table) <= 120
    row = table[1]
    assert "\N{HORIZONTAL ELLIPSIS}" in row
    assert "the storage API answered 503" in row
    assert row.split()[0] == str(run.pk)

    wide = cli("list", "-o", "wide").splitlines()
    assert wide[0].split() == [
        "ID",
        "STATE",
        "TEMPLATE",
        "HOOK",
        "MOMENT",
        "CLUSTER",
        "STEP",
        "WHY",
        "AGE",
    ]
    assert long_why.strip() in wide[1]
    assert "BeforeClusterUpgrade  v1.33.0" in wide[1]
    assert "backup-persistent-volumes-before-the-upgrade" in wide[1]


def test_json_gives_the_current_step_and_why() -> None:
    run = awaiting()
    [shown] = listed()
    assert shown["id"] == run.pk
    assert shown["currentStep"] == {"name": "approve", "type": "approval", "state": "waiting"}
    assert shown["why"] == "CAB ticket approved?"


def test_a_released_run_shows_released_with_the_engine_state_beside() -> None:
    run = make_run(state=Run.State.FAILED, steps=(("snapshot", "noop", S.FAILED),))
    cli("release", str(run.pk), "--reason", "accept the risk", "--actor", "ops:di")
    assert cli("list").splitlines()[1].split()[1] == "released"
    assert "state:     released (run failed)" in cli("show", str(run.pk))
