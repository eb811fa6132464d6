"""The hook path of the engine: one run per moment, answers from recorded state (no worker)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import override_settings
from django.utils import timezone

from hooksvc.contract import catalog
from tests.support import capi
from tests.support import workflows as wf
from tests.workflows.runs import make_run
from workflows.hookpath import answers, retry
from workflows.hookpath import runs as hook_runs
from workflows.models import Run

pytestmark = pytest.mark.django_db

HOLD = catalog.Status.SUCCESS


def _answer(call: object) -> answers.Answer:
    return answers.answer(call, handler_name="test")  # type: ignore[arg-type]


def test_no_matching_template_lets_the_lifecycle_proceed() -> None:
    wf.template("other-hook", hook="BeforeClusterDelete")
    assert _answer(wf.call()) == answers.PROCEED
    assert Run.objects.count() == 0


def test_a_matching_template_starts_one_run_and_holds() -> None:
    wf.template("backup", retryAfterSeconds=15)
    answer = _answer(wf.call())
    run = Run.objects.get()
    # The run is due to start now: CAPI may come back in a second (workflows.hookpath.retry).
    assert answer == answers.Answer(HOLD, "workflow backup is starting", 1)
    assert (run.template_name, run.hook, run.moment, run.state) == (
        "backup",
        "BeforeClusterUpgrade",
        "v1.33.0",
        "pending",
    )
    assert run.cluster_key == "6f0c2a4e-2d7b-4c61-9a1e-0f5c1d2e3a4b"
    assert run.context["cluster"]["labels"] == {"env": "prod"}


def test_the_same_moment_called_again_finds_the_same_run() -> None:
    wf.template("backup")
    for _ in range(3):
        _answer(wf.call())
    assert Run.objects.count() == 1


@pytest.mark.parametrize(
    ("hook", "first", "second"),
    [
        (
            "BeforeClusterUpgrade",
            {"toKubernetesVersion": "v1.31.0"},
            {"toKubernetesVersion": "v1.32.0"},
        ),
        (
            "BeforeControlPlaneUpgrade",
            {"fromKubernetesVersion": "v1.30.0", "toKubernetesVersion": "v1.31.0"},
            {"fromKubernetesVersion": "v1.31.0", "toKubernetesVersion": "v1.32.0"},
        ),
        (
            "AfterControlPlaneUpgrade",
            {"kubernetesVersion": "v1.31.0"},
            {"kubernetesVersion": "v1.32.0"},
        ),
        ("AfterClusterUpgrade", {"kubernetesVersion": "v1.31.0"}, {"kubernetesVersion": "v1.32.0"}),
    ],
)
def test_a_new_moment_makes_a_new_run(
    hook: str, first: dict[str, Any], second: dict[str, Any]
) -> None:
    wf.template("t", hook=hook)
    _answer(wf.call(hook, **first))
    _answer(wf.call(hook, **first))
    _answer(wf.call(hook, **second))
    assert Run.objects.count() == 2


def test_a_cluster_recreated_under_the_same_name_gets_a_new_run() -> None:
    wf.template("cleanup", hook="BeforeClusterDelete")
    _answer(wf.call("BeforeClusterDelete", cluster=capi.cluster_v1beta2(uid="uid-1")))
    _answer(wf.call("BeforeClusterDelete", cluster=capi.cluster_v1beta2(uid="uid-2")))
    assert sorted(Run.objects.values_list("cluster_key", flat=True)) == ["uid-1", "uid-2"]


def test_the_non_blocking_hook_starts_its_run_and_answers_at_once() -> None:
    wf.template("addons", hook="AfterControlPlaneInitialized")
    assert _answer(wf.call("AfterControlPlaneInitialized")) == answers.PROCEED
    assert Run.objects.get().template_name == "addons"


def test_selectors_and_settings_pick_the_templates() -> None:
    wf.template(
        "prod-only", clusterSelector={"namespaces": ["fleet"], "matchLabels": {"env": "prod"}}
    )
    wf.template("staging-only", clusterSelector={"matchLabels": {"env": "staging"}})
    wf.template("other-class", clusterSelector={"clusterClass": "gpu"})
    wf.template("strict", settings={"profile": "strict"})
    _answer(wf.call(settings={"profile": "strict"}))
    _answer(wf.call(cluster=capi.cluster_v1beta1(uid="u-legacy")))
    by_cluster = sorted(Run.objects.values_list("cluster_key", "template_name"))
    assert by_cluster == [
        ("6f0c2a4e-2d7b-4c61-9a1e-0f5c1d2e3a4b", "prod-only"),
        ("6f0c2a4e-2d7b-4c61-9a1e-0f5c1d2e3a4b", "strict"),
        ("u-legacy", "prod-only"),
    ]


@override_settings(RETRY_AFTER="fixed")
def test_several_templates_combine_like_capi_combines_extensions() -> None:
    wf.template("slow", retryAfterSeconds=30)
    wf.template("fast", retryAfterSeconds=5)
    answer = _answer(wf.call())
    assert answer == answers.Answer(HOLD, "workflow fast is starting; workflow slow is starting", 5)


def test_a_run_keeps_the_template_it_started_with() -> None:
    template = wf.template("backup", steps=[{"name": "a", "type": "noop"}])
    _answer(wf.call())
    template.spec = wf.spec(steps=[{"name": "b", "type": "noop"}])
    template.generation += 1
    template.save()
    _answer(wf.call(toKubernetesVersion="v1.34.0"))
    steps = {r.moment: [s["name"] for s in r.spec["steps"]] for r in Run.objects.all()}
    assert steps == {"v1.33.0": ["a"], "v1.34.0": ["b"]}
    assert sorted(Run.objects.values_list("template_generation", flat=True)) == [1, 2]


NOW = timezone.now()
PAST = NOW - datetime.timedelta(seconds=1)


#: A running run's step, polled again in a minute: the answer is the template's 10 s cap.
#: (A running run with no step due is being settled by the engine: it answers 1 s.)
BUSY = (
    retry.StepTimes(
        state="waiting",
        person=False,
        due_at=NOW + datetime.timedelta(seconds=60),
        started_at=NOW,
        timeout_seconds=None,
    ),
)


def _run(
    state: str = "running", message: str = "workflow w is running step s", **spec_fields: Any
) -> Run:
    return Run(template_name="w", spec=wf.spec(**spec_fields), state=state, message=message)


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (_run(), answers.Answer(HOLD, "workflow w is running step s", 10)),
        (
            _run("pending", "workflow w is waiting for a free slot (at most 2 at once)"),
            answers.Answer(HOLD, "workflow w is waiting for a free slot (at most 2 at once)", 10),
        ),
        (_run("succeeded", ""), answers.PROCEED),
        (
            _run("failed", "workflow w failed at step s: boom"),
            answers.Answer(HOLD, "workflow w failed at step s: boom", 10),
        ),
        (
            _run("failed", "workflow w failed at step s: boom", onFailure="Fail"),
            answers.Answer(catalog.Status.FAILURE, "workflow w failed at step s: boom"),
        ),
        (_run("cancelled", "cancelled"), answers.Answer(HOLD, "cancelled", 10)),
    ],
    ids=["running", "pending", "succeeded", "failed-block", "failed-fail", "cancelled"],
)
def test_render_answers_from_the_runs_state(run: Run, expected: answers.Answer) -> None:
    assert answers.render(run, NOW, BUSY) == expected


@pytest.mark.parametrize(
    ("on_deadline", "expected"),
    [
        ("Proceed", answers.PROCEED),
        (
            "Fail",
            answers.Answer(catalog.Status.FAILURE, "workflow w did not finish before its deadline"),
        ),
        (
            "Block",
            answers.Answer(
                HOLD, "workflow w passed its deadline; holding: workflow w is running step s", 10
            ),
        ),
    ],
)
def test_render_acts_on_a_passed_deadline(on_deadline: str, expected: answers.Answer) -> None:
    run = _run(onDeadline=on_deadline)
    run.deadline_at = PAST
    assert answers.render(run, NOW, BUSY) == expected


def test_a_released_run_lets_the_lifecycle_proceed() -> None:
    run = _run("failed", "boom")
    run.released = True
    assert answers.render(run, NOW) == answers.PROCEED


def test_a_repeated_call_costs_one_query(django_assert_num_queries: Any) -> None:
    """Invariant 1: a poll reads its hook's templates joined to their runs, nothing else."""
    wf.template("backup")
    wf.template("notify")
    _answer(wf.call())
    with django_assert_num_queries(1):
        answer = _answer(wf.call())
    assert answer.retry_after == 1, "the runs are due to start"
    assert len(answer.runs) == 2


def _hook_statements() -> list[tuple[str, int]]:
    """The session's prepared statements of the hook query, with how often each ran."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            ["%FROM workflows_workflowtemplate t LEFT OUTER JOIN workflows_run r%"],
        )
        return [(str(text), int(runs)) for text, runs in cursor.fetchall()]


def test_the_poll_is_parsed_and_planned_once_per_connection() -> None:
    """The hook query is a prepared statement of the session, made once and run again by
    every call (psycopg prepares through a cursor that binds on the server when the
    connection's prepare_threshold is 0: psycopg/_preparing.py PrepareManager.get;
    PostgreSQL counts its executions in pg_prepared_statements)."""
    wf.template("backup")
    _answer(wf.call())
    before = _hook_statements()
    for _ in range(3):
        answer = _answer(wf.call())
    after = _hook_statements()
    assert len(after) == 1, after
    assert after[0][1] - (before[0][1] if before else 0) == 3
    assert answer.retry_after == 1 and len(answer.runs) == 1


def test_with_prepare_off_the_poll_is_not_prepared_and_answers_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HOOKSVC_DB_PREPARE=off (a pooler that cannot keep prepared statements) sets the
    connection's prepare_threshold to None: psycopg then prepares nothing."""
    wf.template("backup")
    prepared = _answer(wf.call())
    connection.ensure_connection()
    monkeypatch.setattr(connection.connection, "prepare_threshold", None)
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    plain = _answer(wf.call())
    assert _hook_statements() == []
    assert (plain.status, plain.message, plain.retry_after, plain.runs) == (
        prepared.status,
        prepared.message,
        prepared.retry_after,
        prepared.runs,
    )


def test_a_template_made_again_under_the_same_name_finds_the_old_run(
    django_assert_num_queries: Any,
) -> None:
    template = wf.template("backup")
    _answer(wf.call())
    template.delete()  # the run's link to its template is cleared
    wf.template("backup")
    with django_assert_num_queries(1):  # found by name in the poll's one query
        answer = _answer(wf.call())
    assert Run.objects.count() == 1
    assert answer.runs == (Run.objects.get().pk,)


@pytest.mark.parametrize("state", ["pending", "running", "failed", "cancelled"])
def test_a_run_that_does_not_hold_the_lifecycle_lets_it_proceed_in_any_state(state: str) -> None:
    wf.template("cleanup", hook="BeforeClusterDelete", holdsLifecycle=False)
    _answer(wf.call("BeforeClusterDelete"))
    run = Run.objects.get()
    Run.objects.filter(pk=run.pk).update(state=state, message="workflow cleanup failed")
    run.refresh_from_db()
    assert answers.render(run, timezone.now()) == answers.PROCEED
    assert _answer(wf.call("BeforeClusterDelete")).retry_after == 0


def test_only_the_one_run_per_moment_constraint_means_another_call_made_the_run() -> None:
    """A duplicate moment is another call's run (found, not an error); any other violation,
    here the state column's CHECK constraint, is a bug and must surface, not be taken for one."""
    make_run()
    with pytest.raises(IntegrityError) as duplicate, transaction.atomic():
        make_run()
    assert hook_runs._is_run_conflict(duplicate.value)

    with pytest.raises(IntegrityError) as bad_state, transaction.atomic():
        Run.objects.update(state="bogus")
    assert "workflows_run_state_check" in str(bad_state.value)
    assert not hook_runs._is_run_conflict(bad_state.value)
