"""UpdateMachine as a workflow, with a real Celery worker, Redis and PostgreSQL.

CAPI's Machine controller calls UpdateMachine while the Machine is marked for update and the
hook is pending, reads Success + retryAfterSeconds > 0 as in progress, Success + 0 as done
(then removes its annotations and marks the hook done), and Failure as failed (an error:
controller-runtime requeues with backoff and the hook stays pending):
kubernetes-sigs/cluster-api core/reconcilers/machine/machine_controller_inplace_update.go,
modelled by tests/support/capi_inplace.py's MachineController. The request has no UID: a
run is the Machine and a digest of its desired specs; repeated calls join it.

Covers: an update held while its workflow runs and released when it ends; a failed update
answered Failure, the same words every time, until an operator releases or retries it; a
desired spec that changes mid-update (a new run, and the earlier one cancelled); two
Machines of one MachineSet at once.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis
from django.test import Client, override_settings

from tests.support import capi
from tests.support import capi_inplace as capi_model
from tests.support import capi_machines as cm
from tests.support.worker import Worker, wait_for
from tests.workflows import steps_for_tests
from workflows.definitions import apply, spec
from workflows.models import Run
from workflows.operators import actions

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("_inplace_hooks"),
]


@pytest.fixture
def _inplace_hooks() -> Any:
    with override_settings(OPTIONAL_HOOKS="InPlaceUpdates", HOOK_CALL_FLUSH_SECONDS=0):
        yield


def _template(name: str, steps: list[dict[str, Any]]) -> None:
    """An UpdateMachine template, applied as an operator would (its defaults filled in:
    onFailure is Fail for UpdateMachine)."""
    document = {
        "apiVersion": "hooksvc/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": name},
        "spec": {
            "hook": "UpdateMachine",
            "clusterSelector": {"matchLabels": {"inplace": "true"}},
            "retryAfterSeconds": 1,
            "steps": steps,
        },
    }
    apply.templates_apply(documents=spec.parse(json.dumps(document)))


def _desired(name: str = "md-0-abcde", version: str = "v1.33.0") -> dict[str, Any]:
    return cm.objects(machine={"name": name, "version": version, "labels": {"inplace": "true"}})


def _poster(client: Client) -> Any:
    def post(body: dict[str, Any]) -> dict[str, Any]:
        response = client.post(
            capi.hook_path("UpdateMachine"), json.dumps(body), content_type="application/json"
        )
        answer: dict[str, Any] = response.json()
        return answer

    return post


def _drive(*controllers: capi_model.MachineController, timeout: float = 60) -> None:
    """Reconcile each Machine when it asks to be, until all are done or the deadline."""
    due = {id(c): 0.0 for c in controllers}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = [c for c in controllers if not c.done]
        if not pending:
            return
        now = time.monotonic()
        for c in pending:
            if due[id(c)] <= now:
                # The wait is capped so that the test does not idle on a long answer.
                due[id(c)] = now + min(c.reconcile(), 0.5)
        time.sleep(0.05)
    raise AssertionError(f"not done within {timeout} s: {[c.answers[-3:] for c in controllers]}")


def test_an_update_is_held_while_its_workflow_runs_and_released_when_it_ends(
    client: Client, worker: Worker
) -> None:
    _template("update-kubelet", [{"name": "settle", "type": "wait", "with": {"seconds": 2}}])
    machine = capi_model.MachineController(_poster(client), _desired())
    _drive(machine)
    held = [a for a in machine.answers if a["retryAfterSeconds"] > 0]
    assert held, "the Machine was held while the workflow ran"
    assert all(a["status"] == "Success" for a in machine.answers)
    assert machine.answers[-1]["retryAfterSeconds"] == 0
    run = Run.objects.get(hook="UpdateMachine")
    assert (run.state, run.cluster_key, run.moment.split("@")[0]) == (
        "succeeded",
        "fleet/prod-eu-1",
        "md-0-abcde",
    )
    assert run.context["machine"]["version"] == "v1.33.0"


def _until_failed(post: Any, body: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer: dict[str, Any] = post(body)
        if answer["status"] == "Failure":
            return answer
        time.sleep(0.1)
    raise AssertionError("the update did not fail")


def test_a_failed_update_is_answered_failure_until_an_operator_releases_it(
    client: Client, worker: Worker
) -> None:
    _template(
        "update-kubelet",
        [{"name": "check", "type": "count_poll", "with": {"polls": 1, "end": "fail"}}],
    )
    post = _poster(client)
    body = cm.update_machine(_desired())
    failed = _until_failed(post, body)
    again = post(body)
    assert again == failed, "the same words every time: CAPI copies them into conditions"
    assert failed["retryAfterSeconds"] == 0
    run = Run.objects.get(hook="UpdateMachine")
    actions.run_retry(run_id=run.pk, actor="ops:ann", reason="node fixed")
    assert _until_failed(post, body) == failed, "retried, it fails the same way again"
    actions.run_release(run_id=run.pk, actor="ops:ann", reason="done by hand")
    released = post(body)
    assert (released["status"], released["retryAfterSeconds"]) == ("Success", 0)


def test_a_desired_spec_that_changes_mid_update_supersedes_the_earlier_run(
    client: Client, worker: Worker, redis_client: redis.Redis
) -> None:
    """CAPI asks only about the Machine's desired spec of the moment: the run of the
    earlier spec is cancelled once the new one's is scheduled (its step cleaned up as an
    operator's cancel would), not left working on the Machine beside the new one."""
    _template("update-kubelet", [{"name": "work", "type": "tracked_poll", "with": {"every": 1}}])
    post = _poster(client)
    old = cm.update_machine(_desired(version="v1.33.0"))
    assert post(old)["retryAfterSeconds"] > 0
    first = Run.objects.get(hook="UpdateMachine")
    calls = f"{steps_for_tests.PREFIX}:calls:hooksvc-{first.pk}-work"
    wait_for(lambda: redis_client.get(calls) is not None, what="the first run's step at work")

    machine = capi_model.MachineController(post, _desired(version="v1.33.1"))
    _drive(machine)
    first.refresh_from_db()
    second = Run.objects.exclude(pk=first.pk).get(hook="UpdateMachine")
    assert [first.context["machine"]["version"], second.context["machine"]["version"]] == [
        "v1.33.0",
        "v1.33.1",
    ]
    assert (first.state, second.state) == ("cancelled", "succeeded")
    assert first.finished_at is not None and second.finished_at is not None
    assert first.finished_at < second.finished_at, "not left running beside the new run"
    cancel = first.events.get(kind="action", name="cancel")
    assert (cancel.actor, cancel.reason) == (
        "hooksvc",
        f"superseded by run {second.pk}: Machine fleet/md-0-abcde has a new desired spec",
    )
    cleaned = f"{steps_for_tests.PREFIX}:cleaned:hooksvc-{first.pk}-work"
    wait_for(lambda: redis_client.get(cleaned) == b"1", what="the first run's cleanup")
    assert redis_client.get(f"{steps_for_tests.PREFIX}:cleaned:hooksvc-{second.pk}-work") is None
    # Asked about the earlier spec again, it says what became of it (an operator's retry
    # would run it again).
    assert post(old) == {
        "apiVersion": capi.API_VERSION,
        "kind": "UpdateMachineResponse",
        "status": "Failure",
        "message": (
            f"workflow update-kubelet was cancelled: its Machine has a new desired spec, run"
            f" {second.pk}"
        ),
        "retryAfterSeconds": 0,
    }


def test_two_machines_of_one_machine_set_update_in_parallel(client: Client, worker: Worker) -> None:
    _template("update-kubelet", [{"name": "settle", "type": "wait", "with": {"seconds": 2}}])
    post = _poster(client)
    machines = [
        capi_model.MachineController(post, _desired(name=n)) for n in ("md-0-aaaaa", "md-0-bbbbb")
    ]
    _drive(*machines)
    runs = Run.objects.filter(hook="UpdateMachine")
    assert sorted(r.moment.split("@")[0] for r in runs) == ["md-0-aaaaa", "md-0-bbbbb"]
    assert {r.state for r in runs} == {"succeeded"}
    starts = sorted(r.started_at for r in runs if r.started_at is not None)
    ends = sorted(r.finished_at for r in runs if r.finished_at is not None)
    assert starts[1] < ends[0], "the second started before the first ended"
