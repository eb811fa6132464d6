"""A lease is extended from its claim until its outcome is recorded, not only while its code runs.

Covers, in process (the heartbeat's view, no timing): a poll batch whose outcomes move two
runs advances them one after the other; while the first run's next step runs (a helm
install may take HOOKSVC_HELM_TIMEOUT_SECONDS plus a grace, over five minutes), the second
run's outcome waits unrecorded and its lease stays with the heartbeat, so a live worker
does not lose it to another batch; then both outcomes are recorded, none dropped. Within
one `advance`, the steps it claimed together run one after the other and are recorded
together: the first one's outcome keeps its lease while the next runs.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import capi
from tests.support import workflows as wf
from tests.workflows import steps_for_tests  # noqa: F401  (registers count_poll)
from workflows.engine import leases, polls, scheduling
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, StepRun, WorkflowTemplate
from workflows.steps import registry

pytestmark = pytest.mark.django_db


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, set[int]]]]:
    """A step type `lease_probe` that records, per call, its run and the steps whose
    leases the heartbeat holds while it runs (where a helm command would be running)."""
    seen: list[tuple[int, set[int]]] = []

    def probe(ctx: registry.StepContext) -> registry.Outcome:
        seen.append((ctx.run_id, leases.heartbeat.holding()))
        return registry.Done({})

    # The built-ins first: their modules register once per process, so the registry
    # restored afterwards must already hold them.
    registry.load_builtins()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.step_type("lease_probe")(probe)
    registry.step_type("lease_probe_inline", inline=True)(probe)
    yield seen


def _run(template: WorkflowTemplate, cluster: str) -> Run:
    call = wf.call(cluster=capi.cluster_v1beta2(name=cluster, uid=f"uid-{cluster}"))
    [run] = hook_runs.runs_ensure(templates=[template], call=call)
    return run


def test_a_batch_keeps_the_lease_of_an_unrecorded_outcome_while_another_runs_next_step(
    probes: list[tuple[int, set[int]]],
    sent: list[tuple[str, Any]],
    now: list[datetime.datetime],
    caplog: pytest.LogCaptureFixture,
) -> None:
    template = wf.template(
        "chain",
        steps=[
            {"name": "poll", "type": "count_poll", "with": {"every": 60, "polls": 2}},
            {"name": "next", "type": "lease_probe", "dependsOn": ["poll"]},
        ],
    )
    runs = [_run(template, cluster) for cluster in ("c1", "c2")]
    for run in runs:
        scheduling.advance(run.pk)
    polled = {run.pk: StepRun.objects.get(run=run, name="poll").pk for run in runs}
    now[0] += datetime.timedelta(seconds=61)

    with caplog.at_level(logging.WARNING, logger="workflows.engine.attempts"):
        report = polls.poll_due()

    assert report == polls.BatchReport(claimed=2, polled=2, finished=2)
    (first, held), (second, _) = probes
    assert {first, second} == set(polled)
    assert polled[second] in held, "the second run's outcome lost its lease meanwhile"
    assert not leases.heartbeat.holding(), "every lease is let go once the batch has recorded"
    for run in runs:
        assert Run.objects.get(pk=run.pk).state == "succeeded"
    assert [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()] == []


def test_steps_claimed_together_keep_their_leases_until_all_are_recorded(
    probes: list[tuple[int, set[int]]], sent: list[tuple[str, Any]]
) -> None:
    template = wf.template(
        "pair",
        steps=[
            {"name": "a", "type": "lease_probe_inline"},
            {"name": "b", "type": "lease_probe_inline"},
        ],
    )
    run = _run(template, "c1")

    scheduling.advance(run.pk)

    steps = {s.name: s.pk for s in StepRun.objects.filter(run=run)}
    [(_, held_first), (_, held_second)] = probes
    ran_first = steps["a"] if steps["a"] in held_first else steps["b"]
    assert held_first >= set(steps.values()), "a claimed step waits with its lease held"
    assert ran_first in held_second, "the first outcome lost its lease while the next ran"
    assert Run.objects.get(pk=run.pk).state == "succeeded"
    assert not leases.heartbeat.holding()
