"""The honest run state (workflows/operators/states.py): the same answer in SQL and in Python."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.workflows.runs import make_run
from workflows.models import Run
from workflows.operators import states

pytestmark = pytest.mark.django_db

#: (engine state, released, steps, the state an operator must see)
CASES = [
    ("pending", False, (), "pending"),
    ("running", False, (("backup", "backup_pvs", "waiting"),), "running"),
    ("running", False, (("gate", "approval", "waiting"),), "awaiting_approval"),
    # An approval step not yet reached does not make the run wait for a person.
    ("running", False, (("a", "noop", "waiting"), ("gate", "approval", "pending")), "running"),
    ("running", True, (("gate", "approval", "waiting"),), "released"),
    ("failed", False, (("a", "noop", "failed"),), "failed"),
    ("failed", True, (("a", "noop", "failed"),), "released"),
    ("cancelled", False, (), "cancelled"),
    ("cancelled", True, (), "released"),
    ("pending", True, (), "released"),
    # Released while running, then finished: it did succeed.
    ("succeeded", True, (("a", "noop", "succeeded"),), "succeeded"),
    ("succeeded", False, (("gate", "approval", "succeeded"),), "succeeded"),
]


def _runs() -> dict[int, str]:
    expected = {}
    for i, (state, released, steps, shown) in enumerate(CASES):
        run = make_run(state=state, cluster=f"fleet/c{i}", steps=steps)
        Run.objects.filter(pk=run.pk).update(released=released)
        expected[run.pk] = shown
    return expected


def test_the_sql_annotation_and_the_python_answer_agree_on_every_case() -> None:
    expected = _runs()
    annotated = {r.pk: r.display_state for r in states.annotate(Run.objects.all())}  # type: ignore[attr-defined]
    assert annotated == expected
    assert {pk: states.of(Run.objects.get(pk=pk)) for pk in expected} == expected


def test_filtering_by_each_state_finds_exactly_its_runs() -> None:
    expected = _runs()
    for state in states.State.values:
        found = set(Run.objects.filter(states.where(state)).values_list("pk", flat=True))
        assert found == {pk for pk, shown in expected.items() if shown == state}, state
    holding = set(Run.objects.filter(states.where_any(states.HOLDING)).values_list("pk", flat=True))
    assert holding == {pk for pk, shown in expected.items() if shown in states.HOLDING}


def test_counts_by_state_are_one_query_and_name_every_state() -> None:
    _runs()
    with CaptureQueriesContext(connection) as queries:
        counted = states.counts(Run.objects.all())
    assert len(queries) == 1
    assert counted == {
        "awaiting_approval": 1,
        "running": 2,
        "pending": 1,
        "failed": 1,
        "cancelled": 1,
        "released": 4,
        "succeeded": 2,
    }


def test_an_unknown_state_is_refused_with_the_known_ones_named() -> None:
    with pytest.raises(ValueError, match="unknown state 'waiting'; one of: awaiting_approval"):
        states.where("waiting")


def test_the_words_shown_for_a_state() -> None:
    assert states.label("awaiting_approval") == "waiting for approval"
    assert states.label("released") == "released"
