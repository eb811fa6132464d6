"""A new desired spec of a Machine supersedes its earlier UpdateMachine runs (engine tier).

The test is the engine (`sent` records the messages): the run of the new spec cancels,
once its schedule commits, the Machine's earlier runs that are still active, and only
those: not another Machine's (whose name the first one's starts), not a run of the same
spec. A supersede cut short (the worker died between the commit and the cancel) is done at
the new run's next advance. The worker tier (tests/workflows/test_worker_update_machine.py)
shows the cleanup and what CAPI is answered.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client, override_settings

from tests.support import capi
from tests.support import capi_machines as cm
from workflows.definitions import apply, spec
from workflows.engine import scheduling
from workflows.models import Run

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_update_template", "sent")]


@pytest.fixture
def _update_template() -> Any:
    document = {
        "apiVersion": "hooksvc/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": "update-kubelet"},
        "spec": {
            "hook": "UpdateMachine",
            "clusterSelector": {"matchLabels": {"inplace": "true"}},
            "steps": [{"name": "approve", "type": "approval"}],
        },
    }
    apply.templates_apply(documents=spec.parse(json.dumps(document)))
    with override_settings(OPTIONAL_HOOKS="InPlaceUpdates", HOOK_CALL_FLUSH_SECONDS=0):
        yield


def update(client: Client, name: str, version: str) -> Run:
    """CAPI's call for Machine fleet/`name` at `version`, and the run it joins."""
    machine = {"name": name, "version": version, "labels": {"inplace": "true"}}
    body = cm.update_machine(cm.objects(machine=machine))
    client.post(capi.hook_path("UpdateMachine"), json.dumps(body), content_type="application/json")
    return Run.objects.filter(moment__startswith=f"{name}@").order_by("-pk").first() or Run()


def states(*runs: Run) -> list[str]:
    return [Run.objects.get(pk=r.pk).state for r in runs]


def test_only_the_machines_earlier_runs_are_cancelled_and_a_cut_short_one_at_the_next_advance(
    client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    old = update(client, "md-0", "v1.33.0")
    other = update(client, "md-0-b", "v1.33.0")  # its name starts with the first one's
    for run in (old, other):
        scheduling.advance(run.pk)
    new = update(client, "md-0", "v1.33.1")
    assert update(client, "md-0", "v1.33.1") == new, "a repeated call joins the run"
    assert states(old, other, new) == ["running", "running", "pending"]

    # The worker dies after the new run's schedule commits, before the cancel.
    with django_capture_on_commit_callbacks(execute=False):
        scheduling.advance(new.pk)
    assert states(old, other, new) == ["running", "running", "running"]

    with django_capture_on_commit_callbacks(execute=True):
        scheduling.advance(new.pk)  # its next advance: a poll, the reconciler
    assert states(old, other, new) == ["cancelled", "running", "running"]
    assert Run.objects.get(pk=old.pk).message == (
        f"workflow update-kubelet was cancelled: its Machine has a new desired spec, run {new.pk}"
    )
    with django_capture_on_commit_callbacks(execute=True):
        scheduling.advance(new.pk)
    assert old.events.filter(kind="action", name="cancel", actor="hooksvc").count() == 1
