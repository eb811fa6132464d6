"""Stalls are visible (issue 22, invariant 10): what progress is, and who judges a stall.

Covers: progress is recorded on change only (a poll that reports the same writes no
progress time; an error is no progress, nor is the poll after it that reports what the
step said before); a due step past its bound is stalled, one that waits for a person or
whose bound is 0 never is; every built-in step type has a documented normal bound
(docs/stalls.md) that its steps get when their run starts; `notice` announces a stall
once, and again only after progress. Through the real worker, the surfaces:
tests/workflows/test_stalls_surfaces.py.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import pytest
from django.db.models import F

from tests.support import capi
from tests.support import workflows as wf
from tests.workflows.runs import make_run
from workflows import durations
from workflows.definitions import fields, spec
from workflows.engine import dispatch, scheduling, stalls
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, StepRun
from workflows.steps import registry

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "stalls.md"


def _step(**fields: Any) -> StepRun:
    run = make_run(steps=(("job", "k8s_job", "waiting"),))
    step = run.steps.get()
    if fields:
        StepRun.objects.filter(pk=step.pk).update(**fields)
    step.refresh_from_db()
    return step


def _write(step: StepRun, **fields: Any) -> StepRun:
    """An UPDATE of the step's row, as any writer of it makes one."""
    StepRun.objects.filter(pk=step.pk).update(**fields)
    step.refresh_from_db()
    return step


def test_a_poll_that_reports_the_same_records_no_progress() -> None:
    step = _write(_step(), message="Job ns/j: 1 active")
    first = step.progress_at
    assert first is not None, "what the step reports changed: progress"

    step = _write(step, message="Job ns/j: 1 active", due_at=F("due_at"), memo={"polls": 9})

    assert step.progress_at == first, "the same report is no progress, however often polled"
    step = _write(step, message="Job ns/j: 1 succeeded")
    assert step.progress_at is not None
    assert step.progress_at > first


def test_an_error_is_no_progress_nor_the_poll_after_it_that_says_what_it_said_before() -> None:
    step = _write(_step(), message="Job ns/j: 1 active")
    before = step.progress_at

    step = _write(step, state="ready", failures=1, message="connection refused")
    assert step.progress_at == before, "a failed attempt is no progress"
    step = _write(step, state="waiting", failures=0, message="Job ns/j: 1 active")
    assert step.progress_at == before, "back to the same report: still no progress"

    step = _write(step, output={"active": 0, "succeeded": 1})
    assert step.progress_at is not None
    assert before is not None
    assert step.progress_at > before, "new output: progress"


def test_a_pending_step_has_made_no_progress_and_becoming_due_is_progress() -> None:
    run = make_run(steps=(("job", "k8s_job", "pending"),))
    step = run.steps.get()
    assert step.progress_at is None
    step = _write(step, state="ready", due_at=datetime.datetime.now(datetime.UTC))
    assert step.progress_at is not None


def _after(step: StepRun, seconds: float) -> datetime.datetime:
    """`seconds` after the step's last progress."""
    assert step.progress_at is not None
    return step.progress_at + datetime.timedelta(seconds=seconds)


def _age(step: StepRun, seconds: float) -> StepRun:
    """The step's last progress `seconds` ago (an UPDATE of progress_at alone)."""
    assert step.progress_at is not None
    at = step.progress_at - datetime.timedelta(seconds=seconds)
    return _write(step, progress_at=at)


@pytest.mark.parametrize(
    ("fields", "stalled"),
    [
        ({"stall_seconds": 60}, True),
        ({"stall_seconds": 600}, False),
        ({"stall_seconds": None}, False),  # the default bound, 900 s
        ({"stall_seconds": 0}, False),  # never
        ({"stall_seconds": 60, "waits_for_person": True}, False),
        ({"stall_seconds": 60, "state": "succeeded"}, False),
    ],
)
def test_a_due_step_past_its_bound_is_stalled(fields: dict[str, Any], stalled: bool) -> None:
    step = _age(_write(_step(), message="Job ns/j: 1 active"), 120)
    step = _write(step, **fields)
    now = _after(step, 120)

    assert stalls.steps(now).filter(pk=step.pk).exists() is stalled
    # The reconciler's pass and the gauge judge on the database's clock (now, ~120 s later).
    assert stalls.steps().filter(pk=step.pk).exists() is stalled
    assert (stalls.describe(step, now) is not None) is stalled
    assert sum(stalls.by_type(now).values()) == (1 if stalled else 0)


def test_what_a_stalled_step_says_names_what_it_waits_for() -> None:
    step = _age(_write(_step(stall_seconds=60), message="Job ns/j: 1 active"), 0)
    now = _after(step, 25 * 60)
    assert stalls.describe(step, now) == {
        "since": _after(step, 0).isoformat(timespec="seconds"),
        "for": "25 min",
        "normal": "1 min",
        "waitsFor": "Job ns/j: 1 active",
    }


def _documented() -> dict[str, str]:
    """docs/stalls.md's table: step type -> its normal bound as written."""
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| ([^|]+) \|", DOC.read_text(), re.M)
    return {name: bound.strip() for name, bound in rows}


def _said(seconds: int) -> str:
    return "never" if seconds == 0 else durations.span(seconds)


def test_every_built_in_step_type_has_a_documented_normal_bound() -> None:
    documented = _documented()
    builtin = {
        name
        for name in registry.names()
        if registry.get(name).run.__module__.startswith("workflows.steps.")
    }
    assert set(documented) == builtin, "docs/stalls.md lists every built-in step type"
    for name in builtin:
        step_type = registry.get(name)
        if callable(step_type.stall_seconds):
            continue  # a function of its parameters: the doc says which
        assert documented[name] == _said(step_type.normal_seconds({})), name
    assert documented["wait"] == "its `seconds` + 5 min"
    assert registry.get("wait").normal_seconds({"seconds": 600}) == 900


def test_a_runs_steps_get_their_types_bound_when_it_starts(sent: list[Any]) -> None:
    template = wf.template(
        "stalls-bounds",
        steps=[
            {"name": "hold", "type": "wait", "with": {"seconds": 60}},
            {"name": "ask", "type": "approval", "dependsOn": ["hold"]},
            {"name": "job", "type": "stuck_poll", "with": {"normalSeconds": 7}},
            {"name": "long", "type": "noop", "stallSeconds": 7200},
            {"name": "quiet", "type": "noop", "stallSeconds": 0},
        ],
    )
    call = wf.call(cluster=capi.cluster_v1beta2(name="c-bounds", uid="uid-c-bounds"))
    [run] = hook_runs.runs_ensure(templates=[template], call=call)
    scheduling.advance(run.pk)
    bounds = dict(StepRun.objects.filter(run=run).values_list("name", "stall_seconds"))
    # The template's stallSeconds wins over the type's bound; 0 says "never".
    assert bounds == {"hold": 60 + 300, "ask": 0, "job": 7, "long": 7200, "quiet": 0}


@pytest.mark.parametrize("given", [-1, "600", 1.5, True])
def test_a_stall_bound_that_is_no_whole_number_of_seconds_is_refused(given: Any) -> None:
    document = {"hook": "BeforeClusterUpgrade", "steps": [{"name": "a", "type": "noop"}]}
    document["steps"][0]["stallSeconds"] = given  # type: ignore[index]
    with pytest.raises(fields.FieldError, match=r"spec\.steps\[0\]\.stallSeconds"):
        spec.workflow_template(document, "stalls")


def test_a_stall_is_announced_once_and_again_only_after_progress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    announced: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        dispatch,
        "cluster_event",
        lambda run_id, outcome, text="": announced.append((run_id, outcome, text)),
    )
    step = _age(_write(_step(stall_seconds=60), message="Job ns/j: 1 active"), 120)
    now = _after(step, 120)

    assert stalls.notice(now) == 1
    assert stalls.notice(now) == 0, "the same stall is announced once"
    assert announced == [
        (
            step.run_id,
            "stalled",
            "workflow backup-before-upgrade for BeforeClusterUpgrade v1.33.0: step job"
            " (k8s_job) has made no progress for longer than its normal 1 min:"
            " Job ns/j: 1 active",
        )
    ]

    step = _age(_write(step, message="Job ns/j: 2 active"), 0)
    later = _after(step, 61)
    assert stalls.notice(later) == 1, "progress, then a new stall: a new announcement"
    Run.objects.filter(pk=step.run_id).update(state=Run.State.CANCELLED)
    _write(step, message="Job ns/j: 3 active")
    assert stalls.notice(later + datetime.timedelta(hours=1)) == 0, "a run that is not running"


def test_each_built_in_step_type_shows_a_stall_before_its_timeout_fails_it() -> None:
    """Invariant 10: no step holds a cluster without a bound, and a stall shows first."""
    for name in _documented():
        step_type = registry.get(name)
        if step_type.waits_for_person:
            # A person ends it, shown as waiting for approval; its run's deadline bounds it.
            assert step_type.normal_seconds({}) == 0, name
        elif not step_type.inline:  # an inline type returns at once; `wait`'s timer ends
            timeout = step_type.default_timeout_seconds
            assert timeout > 0, f"{name} has no default bound"
            assert 0 < step_type.normal_seconds({}) < timeout, name
