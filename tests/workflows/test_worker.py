"""The engine end to end: CAPI calls over HTTPS, a real Celery worker, Redis and PostgreSQL.

Covers: a blocking hook holds until its run finishes; fifty concurrent identical calls
make one run; deadlines act as onDeadline says; the concurrency budget is never exceeded;
a worker killed with SIGKILL mid-step and a flushed Redis still end in finished runs with
each side effect done once; a chained upgrade makes one run per moment; operator actions.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support import capi, servers
from tests.support import workflows as wf
from tests.support.worker import Worker
from tests.workflows.conftest import Receiver
from tests.workflows.steps_for_tests import PREFIX
from workflows.models import Run, RunEvent, StepRun, WorkerBeat
from workflows.operators import actions

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HOOK = "BeforeClusterUpgrade"


def _cluster(name: str) -> dict[str, Any]:
    return capi.cluster_v1beta2(name=name, uid=f"uid-{name}")


def call_hook(
    server: servers.HookServer, hook: str = HOOK, cluster: str = "c1", **fields: Any
) -> dict[str, Any]:
    status, body = server.post(
        capi.hook_path(hook), capi.hook_request(hook, _cluster(cluster), **fields)
    )
    assert status == 200, body
    return body


def poll_until(
    server: servers.HookServer,
    done: Callable[[dict[str, Any]], bool],
    *,
    timeout: float = 40,
    hook: str = HOOK,
    cluster: str = "c1",
    **fields: Any,
) -> list[dict[str, Any]]:
    """Call the hook as CAPI does until `done(answer)`; return every answer."""
    answers = []
    deadline = time.monotonic() + timeout
    while True:
        answers.append(call_hook(server, hook, cluster, **fields))
        if done(answers[-1]):
            return answers
        assert time.monotonic() < deadline, f"still {answers[-1]} after {timeout} s"
        time.sleep(0.2)


def proceeds(answer: dict[str, Any]) -> bool:
    return bool(answer["status"] == "Success" and answer["retryAfterSeconds"] == 0)


def wait_for(predicate: Callable[[], bool], timeout: float = 40, what: str = "condition") -> float:
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout, f"{what} not reached within {timeout} s"
        time.sleep(0.1)
    return time.monotonic() - started


def test_a_blocking_hook_holds_until_its_run_finishes_then_answers_zero(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    wf.template(
        "backup",
        retryAfterSeconds=1,
        steps=[
            {"name": "snapshot", "type": "wait", "with": {"seconds": 2}},
            {"name": "verify", "type": "noop", "dependsOn": ["snapshot"]},
        ],
    )
    answers = poll_until(hook_server, proceeds)
    held = [a for a in answers if a["retryAfterSeconds"] > 0]
    assert held, "the hook never held the lifecycle"
    assert all(a["status"] == "Success" and a["retryAfterSeconds"] == 1 for a in held)
    assert "workflow backup is running step snapshot" in {a["message"] for a in held}
    assert answers[-1] == {
        "apiVersion": capi.API_VERSION,
        "kind": "BeforeClusterUpgradeResponse",
        "status": "Success",
        "retryAfterSeconds": 0,
    }
    run = Run.objects.get()
    assert run.state == "succeeded"
    assert list(run.steps.values_list("name", "state")) == [
        ("snapshot", "succeeded"),
        ("verify", "succeeded"),
    ]


def test_fifty_concurrent_identical_calls_make_exactly_one_run(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    wf.template("backup", steps=[{"name": "hold", "type": "approval"}])
    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(lambda _: call_hook(hook_server), range(50)))
    assert Run.objects.count() == 1
    # 1 while the run is due to start, then the template's 10 while it waits for a person.
    assert {(a["status"], a["retryAfterSeconds"]) for a in answers} <= {
        ("Success", 1),
        ("Success", 10),
    }


@pytest.mark.parametrize(
    ("on_deadline", "final"),
    [
        ("Proceed", proceeds),
        ("Fail", lambda a: a["status"] == "Failure"),
        ("Block", lambda a: "passed its deadline" in a.get("message", "")),
    ],
)
def test_a_passed_deadline_acts_as_on_deadline_says(
    hook_server: servers.HookServer,
    worker: Worker,
    on_deadline: str,
    final: Callable[[dict[str, Any]], bool],
) -> None:
    wf.template(
        "gate",
        deadlineSeconds=2,
        onDeadline=on_deadline,
        steps=[{"name": "approve", "type": "approval"}],
    )
    answers = poll_until(hook_server, final)
    assert answers[0]["retryAfterSeconds"] > 0, "the run must hold before its deadline"
    if on_deadline == "Fail":
        assert answers[-1]["message"] == "workflow gate did not finish before its deadline"
    # The engine records that the deadline passed (the reconciler wakes the run for it).
    wait_for(lambda: RunEvent.objects.filter(name="deadline").exists(), what="deadline event")
    event = RunEvent.objects.get(name="deadline")
    assert (event.actor, event.reason) == ("hooksvc", f"onDeadline: {on_deadline}")
    expected_state = "failed" if on_deadline == "Fail" else "running"
    wait_for(lambda: Run.objects.get().state == expected_state, what=expected_state)


def test_the_concurrency_budget_is_never_exceeded(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    wf.template(
        "drain",
        concurrency=2,
        retryAfterSeconds=1,
        steps=[{"name": "w", "type": "wait", "with": {"seconds": 1}}],
    )
    clusters = [f"c{i}" for i in range(6)]
    for c in clusters:
        call_hook(hook_server, cluster=c)
    # The last cluster waits for two others to finish: CAPI is told why it waits.
    seen = poll_until(
        hook_server, lambda a: "free slot" in a.get("message", "") or proceeds(a), cluster="c5"
    )
    assert seen[-1]["message"] == "workflow drain is waiting for a free slot (at most 2 at once)"
    wait_for(
        lambda: Run.objects.filter(state="succeeded").count() == 6, timeout=60, what="all runs done"
    )
    intervals = sorted(
        (s, f) for s, f in Run.objects.values_list("started_at", "finished_at") if s and f
    )
    max_overlap = max(sum(1 for s, f in intervals if s <= start < f) for start, _ in intervals)
    assert max_overlap == 2
    for c in clusters:
        assert proceeds(call_hook(hook_server, cluster=c))


def _effect_counts(r: redis.Redis) -> tuple[dict[str, int], dict[str, int]]:
    def counts(kind: str) -> dict[str, int]:
        keys = [k if isinstance(k, str) else k.decode() for k in r.keys(f"{PREFIX}:{kind}:*")]
        return {k.split(":", 2)[2]: int(r.get(k) or 0) for k in keys}

    return counts("executions"), counts("effects-created")


def test_a_worker_killed_mid_step_resumes_and_does_each_side_effect_once(
    hook_server: servers.HookServer, worker: Worker, redis_client: redis.Redis, tmp_path: Path
) -> None:
    gate = tmp_path / "release"
    wf.template(
        "backup",
        retryAfterSeconds=1,
        steps=[
            {"name": "snapshot", "type": "record", "with": {"holdUntilFile": str(gate)}},
            {"name": "verify", "type": "record", "dependsOn": ["snapshot"]},
        ],
    )
    call_hook(hook_server)
    wait_for(lambda: bool(redis_client.keys(f"{PREFIX}:holding:*")), what="the step to start")
    # Transactional tests truncate every table after each test, this session's worker's
    # heartbeat rows too: it writes its own again within HOOKSVC_WORKER_BEAT_SECONDS, and
    # only a process whose row is there is found dead.
    owner = StepRun.objects.get(name="snapshot").lease_owner
    wait_for(lambda: WorkerBeat.objects.filter(owner=owner).exists(), what="its heartbeat")
    worker.kill()
    gate.touch()
    assert call_hook(hook_server)["retryAfterSeconds"] > 0, "the hook must keep holding"
    killed_at = time.monotonic()
    worker.start()
    answers = poll_until(hook_server, proceeds, timeout=60)
    print(f"recovered from SIGKILL in {time.monotonic() - killed_at:.1f} s")
    assert all(a["status"] == "Success" for a in answers)
    executions, created = _effect_counts(redis_client)
    run = Run.objects.get()
    snapshot, verify = f"hooksvc-{run.pk}-snapshot", f"hooksvc-{run.pk}-verify"
    assert executions[snapshot] == 2, "the killed step ran again"
    assert created == {snapshot: 1, verify: 1}, "each side effect happened exactly once"


def test_a_flushed_redis_delays_waiting_runs_but_loses_none(
    hook_server: servers.HookServer, worker: Worker, redis_client: redis.Redis
) -> None:
    wf.template(
        "soak",
        retryAfterSeconds=1,
        steps=[
            # The waits begin together, once the three runs are approved at once: begun with
            # each run, one hook call after the other, the first was over before the third
            # began on a loaded machine (over a second a call), never all three waiting.
            {"name": "go", "type": "approval"},
            {"name": "w", "type": "wait", "with": {"seconds": 2}, "dependsOn": ["go"]},
            {"name": "after", "type": "record", "dependsOn": ["w"]},
        ],
    )
    clusters = ["a", "b", "c"]
    for c in clusters:
        call_hook(hook_server, cluster=c)
    approvals = StepRun.objects.filter(name="go", state="waiting")
    wait_for(lambda: approvals.count() == 3, what="runs at their approval")
    for run_id in list(approvals.values_list("run_id", flat=True)):
        actions.step_approve(run_id=run_id, step_name="go", actor="test", reason="all at once")
    wait_for(
        lambda: StepRun.objects.filter(name="w", state="waiting").count() == 3, what="runs waiting"
    )
    redis_client.flushdb()
    flushed_at = time.monotonic()
    for c in clusters:
        poll_until(hook_server, proceeds, cluster=c, timeout=60)
    print(f"recovered from a flushed Redis in {time.monotonic() - flushed_at:.1f} s")
    assert Run.objects.filter(state="succeeded").count() == 3
    _, created = _effect_counts(redis_client)
    assert sorted(created.values()) == [1, 1, 1]


def test_a_chained_upgrade_makes_one_run_per_moment(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    hooks = [
        "BeforeClusterUpgrade",
        "BeforeControlPlaneUpgrade",
        "AfterControlPlaneUpgrade",
        "BeforeWorkersUpgrade",
        "AfterWorkersUpgrade",
        "AfterClusterUpgrade",
    ]
    for hook in hooks:
        wf.template(f"t-{hook.lower()}", hook=hook, retryAfterSeconds=1)
    plan = {
        "controlPlaneUpgrades": [{"version": v} for v in ("v1.31.0", "v1.32.0", "v1.33.0")],
        "workersUpgrades": [{"version": "v1.33.0"}],
    }
    sequence: list[tuple[str, dict[str, Any]]] = [
        (
            "BeforeClusterUpgrade",
            {"fromKubernetesVersion": "v1.30.0", "toKubernetesVersion": "v1.33.0"},
        ),
    ]
    for old, new in (("v1.30.0", "v1.31.0"), ("v1.31.0", "v1.32.0"), ("v1.32.0", "v1.33.0")):
        sequence += [
            (
                "BeforeControlPlaneUpgrade",
                {"fromKubernetesVersion": old, "toKubernetesVersion": new},
            ),
            ("AfterControlPlaneUpgrade", {"kubernetesVersion": new}),
        ]
    sequence += [
        (
            "BeforeWorkersUpgrade",
            {"fromKubernetesVersion": "v1.30.0", "toKubernetesVersion": "v1.33.0"},
        ),
        ("AfterWorkersUpgrade", {"kubernetesVersion": "v1.33.0"}),
        ("AfterClusterUpgrade", {"kubernetesVersion": "v1.33.0"}),
    ]
    for hook, fields in sequence:
        extra: dict[str, Any] = plan if hook != "AfterClusterUpgrade" else {}
        poll_until(hook_server, proceeds, hook=hook, **fields, **extra)
    moments = sorted(Run.objects.values_list("hook", "moment"))
    assert moments == sorted(
        [
            ("BeforeClusterUpgrade", "v1.33.0"),
            ("BeforeControlPlaneUpgrade", "v1.30.0->v1.31.0"),
            ("BeforeControlPlaneUpgrade", "v1.31.0->v1.32.0"),
            ("BeforeControlPlaneUpgrade", "v1.32.0->v1.33.0"),
            ("AfterControlPlaneUpgrade", "v1.31.0"),
            ("AfterControlPlaneUpgrade", "v1.32.0"),
            ("AfterControlPlaneUpgrade", "v1.33.0"),
            ("BeforeWorkersUpgrade", "v1.30.0->v1.33.0"),
            ("AfterWorkersUpgrade", "v1.33.0"),
            ("AfterClusterUpgrade", "v1.33.0"),
        ]
    )
    assert set(Run.objects.values_list("state", flat=True)) == {"succeeded"}


def test_approve_lets_a_held_run_move_on(hook_server: servers.HookServer, worker: Worker) -> None:
    wf.template(
        "gate",
        retryAfterSeconds=1,
        steps=[
            {"name": "approve", "type": "approval"},
            {"name": "after", "type": "noop", "dependsOn": ["approve"]},
        ],
    )
    poll_until(
        hook_server,
        lambda a: a.get("message") == "workflow gate is waiting for approval at step approve",
    )
    run = Run.objects.get()
    actions.step_approve(
        run_id=run.pk, step_name="approve", actor="alice", reason="change ticket 42"
    )
    poll_until(hook_server, proceeds, timeout=15)
    event = RunEvent.objects.get(kind="action", name="approve")
    assert (event.actor, event.reason, event.step_name) == ("alice", "change ticket 42", "approve")
    assert run.steps.get(name="approve").output == {
        "approvedBy": "alice",
        "reason": "change ticket 42",
    }


def test_cancel_keeps_holding_until_released(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    wf.template("gate", retryAfterSeconds=1, steps=[{"name": "approve", "type": "approval"}])
    poll_until(hook_server, lambda a: "waiting for approval" in a.get("message", ""))
    run = Run.objects.get()
    actions.run_cancel(run_id=run.pk, actor="bob", reason="wrong window")
    answer = call_hook(hook_server)
    assert answer["retryAfterSeconds"] == 1
    assert answer["message"].startswith("workflow gate was cancelled by an operator")
    assert run.steps.get().state == "cancelled"
    actions.run_release(run_id=run.pk, actor="bob", reason="upgrade approved out of band")
    assert proceeds(call_hook(hook_server))
    assert list(RunEvent.objects.filter(kind="action").values_list("name", "actor")) == [
        ("release", "bob"),
        ("cancel", "bob"),
    ]


@pytest.mark.parametrize("on_failure", ["Block", "Fail"])
def test_a_failed_step_holds_or_fails_and_retry_recovers_it(
    hook_server: servers.HookServer, worker: Worker, receiver: Receiver, on_failure: str
) -> None:
    receiver.status = 503
    wf.template(
        "notify",
        retryAfterSeconds=1,
        onFailure=on_failure,
        steps=[
            {
                "name": "call",
                "type": "http",
                "with": {"url": receiver.url},
                "retries": 0,
                "retryForSeconds": 0,
            }
        ],
    )
    failed = poll_until(hook_server, lambda a: "failed at step call" in a.get("message", ""))[-1]
    run = Run.objects.get()
    message = (
        f"workflow notify failed at step call: 127.0.0.1:{receiver.server_address[1]}"
        " answered HTTP 503; "
        f"retry it with `.venv/bin/python manage.py workflows retry {run.pk} --step call "
        '--reason "<why>"`'
    )
    if on_failure == "Fail":
        assert failed == {
            "apiVersion": capi.API_VERSION,
            "kind": "BeforeClusterUpgradeResponse",
            "status": "Failure",
            "message": message,
            "retryAfterSeconds": 0,
        }
    else:
        assert (failed["status"], failed["message"], failed["retryAfterSeconds"]) == (
            "Success",
            message,
            1,
        )
    receiver.status = 200
    actions.run_retry(run_id=run.pk, step_name="call", actor="carol", reason="receiver fixed")
    poll_until(hook_server, proceeds, timeout=20)
    keys = {r["headers"]["Idempotency-Key"] for r in receiver.received}
    assert keys == {f"hooksvc-{run.pk}-call", f"hooksvc-{run.pk}-call-r1"}
    body = json.loads(receiver.received[-1]["body"])
    assert (body["cluster"]["name"], body["toKubernetesVersion"]) == ("c1", "v1.33.0")


def test_skip_lets_a_failed_run_go_on(
    hook_server: servers.HookServer, worker: Worker, receiver: Receiver
) -> None:
    receiver.status = 500
    wf.template(
        "notify",
        retryAfterSeconds=1,
        steps=[
            {
                "name": "call",
                "type": "http",
                "with": {"url": receiver.url},
                "retries": 0,
                "retryForSeconds": 0,
            },
            {"name": "after", "type": "noop", "dependsOn": ["call"]},
        ],
    )
    poll_until(hook_server, lambda a: "failed at step call" in a.get("message", ""))
    run = Run.objects.get()
    actions.step_skip(run_id=run.pk, step_name="call", actor="dave", reason="receiver retired")
    poll_until(hook_server, proceeds, timeout=20)
    assert dict(run.steps.values_list("name", "state")) == {"call": "skipped", "after": "succeeded"}


def test_retries_back_off_and_then_succeed(
    hook_server: servers.HookServer, worker: Worker, receiver: Receiver
) -> None:
    receiver.status = 502
    wf.template(
        "notify",
        retryAfterSeconds=1,
        steps=[{"name": "call", "type": "http", "with": {"url": receiver.url}, "retries": 5}],
    )
    call_hook(hook_server)
    wait_for(lambda: StepRun.objects.filter(failures__gte=2).exists(), what="two failed attempts")
    receiver.status = 200
    poll_until(hook_server, proceeds, timeout=30)
    step = StepRun.objects.get()
    assert step.state == "succeeded" and step.failures >= 2
    assert len(receiver.received) == step.failures + 1
