"""The fleet's gauges on /metrics: runs by honest state and how long the oldest held run waits.

`hooksvc_run_blocked_seconds{hook,template}` is the age (from the held engine clock) of
the oldest run whose hook answer holds its cluster's lifecycle; which runs those are is
written in SQL (workflows/operators/holding.py) and checked here against the answer itself
(workflows.hookpath.answers.render), case by case. Hooks that cannot hold are CAPI's
non-blocking AfterControlPlaneInitialized (its response has no retryAfterSeconds:
kubernetes-sigs/cluster-api api/runtime/hooks/v1alpha1/lifecycles_types.go,
AfterControlPlaneInitializedResponse embeds CommonResponse only) and hooksvc's own
ClusterDeleted. `hooksvc_run_awaiting_approval_seconds{template}` is how long the longest
current wait for a person has lasted, from the approval step's start.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.utils import timezone
from prometheus_client.core import Metric

from hooksvc.contract import catalog
from hooksvc.serving import scrape
from tests.hooks.test_metrics import get_metrics, value
from tests.support import servers
from tests.workflows.runs import make_run
from workflows.hookpath import answers
from workflows.models import Run
from workflows.operators import holding

pytestmark = pytest.mark.django_db

UPGRADE = "BeforeClusterUpgrade"


def collect() -> dict[str, dict[tuple[str, ...], float]]:
    families: list[Metric] = list(scrape.RunsCollector().collect())
    return {f.name: {tuple(s.labels.values()): s.value for s in f.samples} for f in families}


def aged(run: Run, now: datetime.datetime, minutes: float, **fields: Any) -> Run:
    """`run` created `minutes` before `now`, with `fields` changed (no engine involved)."""
    created = now - datetime.timedelta(minutes=minutes)
    Run.objects.filter(pk=run.pk).update(created_at=created, **fields)
    run.refresh_from_db()
    return run


def test_runs_are_counted_by_honest_state_and_the_oldest_held_run_gives_the_age(
    now: list[datetime.datetime], django_assert_num_queries: Any
) -> None:
    t = now[0]
    gate = (("approve", "approval", "waiting"),)
    asked = aged(make_run(template="gate", cluster="a/c1", steps=gate), t, 90)
    # Its approval step has waited for an hour (the run started half an hour before).
    asked.steps.update(started_at=t - datetime.timedelta(minutes=60))
    aged(make_run(template="gate", cluster="a/c2", steps=(("s", "noop", "waiting"),)), t, 30)
    aged(make_run(template="gate", cluster="a/c3", state="pending"), t, 5)
    # Released: the lifecycle went on, so however old, it blocks nothing.
    aged(make_run(template="gate", cluster="a/c4", state="failed"), t, 600, released=True)
    aged(make_run(template="gate", cluster="a/c5", state="succeeded"), t, 900)
    aged(make_run(template="backup", cluster="b/c1", state="failed"), t, 45)
    aged(make_run(template="backup", cluster="b/c2", state="cancelled"), t, 50)
    # Held by no run: one that succeeded, one released.
    aged(make_run(template="quiet", cluster="q/c1", state="succeeded"), t, 10)
    released = make_run(template="quiet", cluster="q/c2", state="running", steps=gate)
    aged(released, t, 20, released=True).steps.update(started_at=t - datetime.timedelta(days=1))
    # CAPI does not wait for this hook's answer: counted as a run, never as held.
    notify = make_run(
        template="notify", hook="AfterControlPlaneInitialized", cluster="n/c1", moment=""
    )
    aged(notify, t, 300)

    with django_assert_num_queries(1):
        got = collect()

    runs = got["hooksvc_runs"]
    assert {state: runs["gate", state] for _, state in runs if _ == "gate"} == {
        "awaiting_approval": 1,
        "running": 1,
        "pending": 1,
        "failed": 0,
        "cancelled": 0,
        "released": 1,
        "succeeded": 1,
    }
    assert runs["backup", "failed"] == 1 and runs["backup", "cancelled"] == 1
    assert runs["notify", "running"] == 1
    assert got["hooksvc_run_blocked_seconds"] == {
        (UPGRADE, "gate"): 90 * 60,
        (UPGRADE, "backup"): 50 * 60,
        (UPGRADE, "quiet"): 0,
    }, "the oldest held run per hook and template; 0 where none holds; no non-blocking hook"
    assert got["hooksvc_run_awaiting_approval_seconds"] == {
        ("gate",): 60 * 60,
        ("backup",): 0,
        ("quiet",): 0,
        ("notify",): 0,
    }, "since the approval step started waiting; a released run asks nobody"

    now[0] = t + datetime.timedelta(minutes=10)
    later = collect()
    assert later["hooksvc_run_blocked_seconds"][UPGRADE, "gate"] == 100 * 60, (
        "the age follows the engine's clock"
    )
    assert later["hooksvc_run_awaiting_approval_seconds"]["gate",] == 70 * 60


def test_with_no_runs_both_families_are_there_without_series(
    now: list[datetime.datetime],
) -> None:
    families = list(scrape.RunsCollector().collect())
    assert [(f.name, f.type, f.samples) for f in families] == [
        ("hooksvc_runs", "gauge", []),
        ("hooksvc_run_blocked_seconds", "gauge", []),
        ("hooksvc_run_awaiting_approval_seconds", "gauge", []),
    ]


#: (state, spec changes, run fields, minutes until the deadline or None): what the SQL
#: filter must agree with the rendered answer on.
CASES: list[tuple[str, dict[str, Any], dict[str, Any], float | None]] = [
    ("running", {}, {}, None),
    ("pending", {}, {}, None),
    ("succeeded", {}, {}, None),
    ("failed", {}, {}, None),
    ("failed", {"onFailure": "Fail"}, {}, None),
    ("cancelled", {}, {}, None),
    ("failed", {}, {"released": True}, None),
    ("running", {"holdsLifecycle": False}, {}, None),
    ("running", {"onDeadline": "Proceed"}, {}, 5),
    ("running", {"onDeadline": "Proceed"}, {}, -5),
    ("running", {"onDeadline": "Proceed"}, {"deadline_exceeded": True}, 5),
    ("running", {"onDeadline": "Fail"}, {}, -5),
    ("running", {"onDeadline": "Block"}, {}, -5),
    ("failed", {"onDeadline": "Proceed"}, {}, -1),
]


def _held_by_answer(run: Run, now: datetime.datetime) -> bool:
    if not catalog.MOMENTS[run.hook].blocking:
        return False  # answers.answer answers PROCEED without rendering
    answer = answers.render(run, now)
    return answer.status == catalog.Status.FAILURE or answer.retry_after > 0


@pytest.mark.parametrize("hook", [UPGRADE, "AfterControlPlaneInitialized", "ClusterDeleted"])
@pytest.mark.parametrize("keys_absent", [False, True], ids=["full-spec", "older-spec"])
def test_the_sql_filter_holds_exactly_the_runs_whose_answer_holds(
    now: list[datetime.datetime], hook: str, keys_absent: bool
) -> None:
    t = now[0]
    expected, runs = {}, []
    for i, (state, spec, fields, deadline) in enumerate(CASES):
        run = make_run(template=f"t{i}", hook=hook, state=state, cluster=f"ns/c{i}")
        run.spec = {**run.spec, **spec}
        if keys_absent:
            # A snapshot from before these keys existed: render reads their defaults.
            for key in ("holdsLifecycle", "onDeadline", "onFailure"):
                if key not in spec:
                    run.spec.pop(key, None)
        changes = dict(fields)
        if deadline is not None:
            changes["deadline_at"] = t + datetime.timedelta(minutes=deadline)
        Run.objects.filter(pk=run.pk).update(spec=run.spec, **changes)
        run.refresh_from_db()
        runs.append(run)
        expected[run.pk] = _held_by_answer(run, t)
    held = set(Run.objects.filter(holding.holds(t)).values_list("pk", flat=True))
    table = [(CASES[i], expected[r.pk], r.pk in held) for i, r in enumerate(runs)]
    assert all(want == got for _, want, got in table), [c for c in table if c[1] != c[2]]
    # "held for" (run page, cluster page, fleet, `workflows why`) runs on for the same runs.
    still = {r.pk for r in runs if (h := holding.held(r, t)) is not None and h.holding}
    assert still == held, [
        CASES[i] for i, r in enumerate(runs) if (r.pk in still) != (r.pk in held)
    ]
    if hook == UPGRADE:
        assert 0 < len(held) < len(runs), "the table has runs on both sides"
    else:
        assert not held


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_server_reports_the_fleet_once_whichever_worker_answers(
    hook_server: servers.HookServer,
) -> None:
    """gunicorn runs several workers; the fleet's gauges are computed by the one that answers
    and written to no multiprocess file, so no scrape adds them up twice."""
    gate = (("approve", "approval", "waiting"),)
    for i in range(3):
        make_run(template="many", cluster=f"m/c{i}", steps=gate)
    make_run(template="many", cluster="m/c9", state="failed")
    hour_ago = timezone.now() - datetime.timedelta(hours=1)
    Run.objects.filter(template_name="many").update(created_at=hour_ago)
    for _ in range(6):  # a new connection each time, so either worker may answer
        samples = get_metrics(hook_server)
        assert value(samples, "hooksvc_runs", template="many", state="awaiting_approval") == 3
        assert value(samples, "hooksvc_runs", template="many", state="failed") == 1
        blocked = value(samples, "hooksvc_run_blocked_seconds", hook=UPGRADE, template="many")
        assert blocked >= 3600
