"""Attempts that never record (issue 30): a claim starts the step's clock and counts an attempt.

Covers, in process: a claim sets `started_at` (the step's timeout now bounds a step whose
attempts die before recording anything) and counts one attempt not recorded yet
(`unrecorded`); a recorded outcome resets it; the reaper keeps it (the attempt was lost),
the heartbeat's free of an outcome it could not record takes it back (its process lives); a
step with an unrecorded attempt is not batched but claimed alone (reaper, reconciler), so
that a step that kills its worker takes no batch down with it; past
HOOKSVC_STEP_LOST_ATTEMPTS lost attempts in a row the next one fails the step, saying so and
naming the host that ran it last. Through a real worker: a step type that kills its process
at every attempt fails within its documented bound, and a conformance step whose first
attempt died after making its cluster-admin ClusterRoleBinding has it deleted when the run
is cancelled (cleanup used to need a recorded start).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from django.test import override_settings

from tests.steps.conftest import CLUSTER, CLUSTER_UID, NS, put_kubeconfig_secret
from tests.support import capi, servers
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator
from tests.support.worker import Worker, wait_for
from tests.workflows.steps_for_tests import PREFIX
from workflows import clock
from workflows.engine import attempts, lifecycle, polls, reconciler, scheduling, stepstate
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, RunEvent, StepRun
from workflows.operators import actions

DEAD = "gone-host:4242:0badc0de"


def _run(steps: list[dict[str, Any]], cluster: str = "c1") -> Run:
    template = wf.template(f"lost-{cluster}", steps=steps)
    call = wf.call(cluster=capi.cluster_v1beta2(name=cluster, uid=f"uid-{cluster}"))
    [run] = hook_runs.runs_ensure(templates=[template], call=call)
    return run


def _die(step: StepRun) -> None:
    """The process holding `step`'s lease dies: its heartbeat is old, the reaper frees it."""
    StepRun.objects.filter(pk=step.pk).update(lease_owner=DEAD)
    stepstate.free_leases_of([DEAD])


@pytest.mark.django_db
def test_a_claim_starts_the_steps_clock_and_counts_an_unrecorded_attempt(
    sent: list[tuple[str, Any]],
) -> None:
    run = _run([{"name": "s", "type": "tracked"}])
    [attempt] = scheduling._schedule(run.pk, [])  # the run starts: its step is claimed
    step = StepRun.objects.get(pk=attempt.step.pk)
    assert step.started_at is not None, "the claim started the step's clock"
    assert (step.unrecorded, step.lost_by) == (1, "")

    scheduling.advance(run.pk, [attempts.run(attempt)])

    step.refresh_from_db()
    assert (step.state, step.unrecorded, step.lost_by) == ("succeeded", 0, "")


@pytest.mark.django_db
def test_a_step_whose_attempts_never_record_is_bounded_by_its_timeout(
    sent: list[tuple[str, Any]], later: Callable[[float], datetime.datetime]
) -> None:
    """Its first claim started its clock: once timeoutSeconds passed, the next attempt
    fails it without calling its code, however often its workers died."""
    run = _run([{"name": "s", "type": "tracked", "timeoutSeconds": 60}])
    [attempt] = scheduling._schedule(run.pk, [])
    _die(attempt.step)
    later(61)

    [again] = attempts.claim(step_ids=[attempt.step.pk])
    done = attempts.run(again)

    assert str(done.result.outcome) == "timed out after 60 s"
    scheduling.advance(run.pk, [done])
    assert StepRun.objects.get(pk=attempt.step.pk).state == "failed"


@pytest.mark.django_db
@override_settings(STEP_LOST_ATTEMPTS=3)
def test_after_three_lost_attempts_the_fourth_fails_the_step_naming_the_host(
    sent: list[tuple[str, Any]], clean_redis: redis.Redis
) -> None:
    run = _run([{"name": "s", "type": "tracked"}])
    [attempt] = scheduling._schedule(run.pk, [])
    step_id = attempt.step.pk
    for lost in range(1, 4):
        _die(StepRun.objects.get(pk=step_id))
        assert StepRun.objects.get(pk=step_id).unrecorded == lost, "the reaper keeps the count"
        if lost < 3:
            [attempt] = attempts.claim(step_ids=[step_id])

    [fourth] = attempts.claim(step_ids=[step_id])
    done = attempts.run(fourth)
    scheduling.advance(run.pk, [done])

    step = StepRun.objects.get(pk=step_id)
    assert step.state == "failed"
    assert step.message == (
        "the worker died 3 times running this step (no attempt recorded an outcome);"
        " last seen on host gone-host"
    )
    assert not clean_redis.keys(f"{PREFIX}:calls:*"), "its code was not called a fourth time"
    run.refresh_from_db()
    assert run.state == "failed" and "the worker died 3 times" in run.message


@pytest.mark.django_db
def test_a_lost_attempt_between_recorded_ones_is_forgotten(sent: list[tuple[str, Any]]) -> None:
    """A lost attempt counts only until an outcome is recorded: deaths months apart never
    add up to a failure."""
    run = _run([{"name": "s", "type": "count_poll", "with": {"every": 1, "polls": 5}}])
    [attempt] = scheduling._schedule(run.pk, [])
    _die(attempt.step)
    [again] = attempts.claim(step_ids=[attempt.step.pk])
    assert again.step.unrecorded == 2
    scheduling.advance(run.pk, [attempts.run(again)])
    assert StepRun.objects.get(pk=attempt.step.pk).unrecorded == 0


@pytest.mark.django_db
def test_an_outcome_the_heartbeat_could_not_record_is_not_counted_as_lost(
    sent: list[tuple[str, Any]],
) -> None:
    """The database went away mid-record: the live process frees its lease (the heartbeat's
    free), and that attempt is taken back from the count."""
    run = _run([{"name": "s", "type": "tracked"}])
    [attempt] = scheduling._schedule(run.pk, [])
    assert stepstate.free_leases([attempt.step.pk], [attempt.lease.token], attempt.lease.owner)
    step = StepRun.objects.get(pk=attempt.step.pk)
    assert (step.unrecorded, step.lease_owner) == (0, "")


@pytest.mark.django_db
def test_a_waiting_step_whose_attempt_was_lost_is_claimed_alone_not_batched(
    sent: list[tuple[str, Any]],
    later: Callable[[float], datetime.datetime],
    django_capture_on_commit_callbacks: Any,
) -> None:
    """A batch that met a step that kills its worker lost every step it held: after that,
    the suspect is claimed alone, by a message of its own (the reaper's, else the
    reconciler's), and the batch polls the others."""
    suspect = _run([{"name": "s", "type": "count_poll", "with": {"every": 60}}], "c1")
    other = _run([{"name": "s", "type": "count_poll", "with": {"every": 60}}], "c2")
    for run in (suspect, other):
        scheduling.advance(run.pk)
    lost = StepRun.objects.get(run=suspect)
    StepRun.objects.filter(pk=lost.pk).update(claims=lost.claims + 1, unrecorded=1)
    later(120)

    report = polls.poll_due()

    assert report.claimed == 1, "only the other step is batched"
    assert StepRun.objects.get(pk=lost.pk).claims == lost.claims + 1, "the suspect is left"
    later(60)
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert reconciler.reconcile().steps == 1
    assert ("run_step", lost.pk) in sent, "the reconciler sends it on its own"


@pytest.mark.django_db
def test_lifecycle_never_calls_code_past_the_limit() -> None:
    """The rule alone: the claim that sees N lost attempts before it fails the step."""
    step = StepRun(name="s", type="tracked", unrecorded=4, lost_by="h:1:n")
    with override_settings(STEP_LOST_ATTEMPTS=3):
        stopped = lifecycle.before_call(step, clock.now())
    assert stopped is not None and "3 times" in stopped.message
    step.unrecorded = 3
    with override_settings(STEP_LOST_ATTEMPTS=3):
        assert lifecycle.before_call(step, clock.now()) is None


# --- Through a real worker ---------------------------------------------------------------------

#: Worker liveness in seconds, so that three deaths take seconds: the documented bound of a
#: step that kills its worker is STEP_LOST_ATTEMPTS x (WORKER_DEAD_SECONDS + a batch poll's
#: period + a pool process's restart), docs/engine.md's liveness table.
FAST_DEATH = {
    "HOOKSVC_WORKER_BEAT_SECONDS": "0.5",
    "HOOKSVC_WORKER_DEAD_SECONDS": "2",
    "HOOKSVC_STEP_LOST_ATTEMPTS": "3",
}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_step_that_kills_its_worker_every_attempt_fails_within_its_bound(
    no_worker: None, tmp_path: Path, clean_redis: redis.Redis
) -> None:
    worker = Worker(tmp_path / "data", tmp_path / "worker.log", env=FAST_DEATH)
    worker.start()
    try:
        run = _run([{"name": "s", "type": "crash"}])
        # Bound: 3 x (2 s dead + 1 s batch + restart); generous for a loaded machine.
        wait_for(lambda: Run.objects.get(pk=run.pk).state == "failed", 120, "the run's failure")
    finally:
        worker.stop()
    step = StepRun.objects.get(run=run)
    assert step.state == "failed"
    assert step.message.startswith("the worker died 3 times running this step")
    calls = [int(clean_redis.get(key) or 0) for key in clean_redis.keys(f"{PREFIX}:calls:*")]
    assert calls == [3], "its code ran three times, the fourth attempt failed it"
    assert RunEvent.objects.filter(run=run, name__endswith="->failed", step_name="s").exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_cancelled_run_whose_attempt_died_leaves_no_binding(
    no_worker: None, tmp_path: Path, hook_server: servers.HookServer, kube: KubeEmulator
) -> None:
    """The conformance step's first attempt made its Namespace and its cluster-admin
    ClusterRoleBinding (workflows/steps/conformance.py `_create`), then its worker died
    before it recorded anything; an operator cancels the run: the cleanup deletes both.
    Cleanup used to run only for a step that recorded its start."""
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    put_kubeconfig_secret(kube)
    step = {"name": "conformance", "type": "conformance_then_crash", "with": {"pollSeconds": 1}}
    wf.template("conformance-before-upgrade", retryAfterSeconds=1, steps=[step])
    kubeconfig = tmp_path / "kubeconfig"
    kube.kubeconfig(kubeconfig)
    # Its death is not noticed during the test: the step stays claimed by the dead process.
    env = {"HOOKSVC_WORKER_DEAD_SECONDS": "600"}
    worker = Worker(tmp_path / "data", tmp_path / "worker.log", env=env, kubeconfig=kubeconfig)
    worker.start()
    rbac = ("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
    try:
        cluster = capi.cluster_v1beta2(name=CLUSTER, namespace=NS, uid=CLUSTER_UID)
        hook = "BeforeClusterUpgrade"
        status, _ = hook_server.post(capi.hook_path(hook), capi.hook_request(hook, cluster))
        assert status == 200
        run = Run.objects.get()
        name = f"hooksvc-{run.pk}-conformance"
        wait_for(lambda: kube.get_object(*rbac, None, name) is not None, what="the binding")
        wait_for(lambda: "exited with 'signal 9" in worker.log(), what="the worker's death")
        died = StepRun.objects.get(run=run)
        assert (died.state, died.unrecorded) == ("ready", 1), "nothing was recorded"

        actions.run_cancel(run_id=run.pk, actor="alice", reason="the upgrade window closed")

        wait_for(lambda: kube.get_object(*rbac, None, name) is None, what="the binding deleted")
        wait_for(
            lambda: not kube.get_object("", "v1", "namespaces", None, name),
            what="the Namespace deleted",
        )
    finally:
        worker.stop()
    events = RunEvent.objects.filter(run=run, name="cleanup")
    assert [e.message for e in events] == ["cleanup of cancelled step conformance ran"]
