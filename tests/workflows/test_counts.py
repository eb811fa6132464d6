"""Counts agree with their nouns wherever a message says one ("1 canary", not "1 canaries"):
the gate's message (the hook's answer, the fleet, `why`), the upgrade preview, the run list's
progress, `why` of a cluster with one run, a Deployment's pods, Velero's volumes."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from tests.workflows.runs import make_run
from workflows import durations
from workflows.models import Run
from workflows.steps import gate

LABELS = {"ring": "canary"}


def test_a_count_agrees_with_its_noun() -> None:
    assert durations.count(1, "canary", "canaries") == "1 canary"
    assert durations.count(2, "canary", "canaries") == "2 canaries"
    assert durations.count(0, "volume") == "0 volumes"
    assert durations.noun(1, "step") == "step"


def test_a_gate_waiting_for_one_canary_says_one_canary() -> None:
    said = gate.waits_message({"count": 1, "matchLabels": LABELS}, "v1.33.0")
    assert said == "waits for 1 canary ring=canary to pass AfterClusterUpgrade at v1.33.0"
    said = gate.waits_message({"count": 2, "matchLabels": LABELS}, "v1.33.0", too_few=1)
    assert said.startswith("waits for 2 canaries ring=canary")
    assert said.endswith("(only 1 Cluster has those labels now)")
    said = gate.waits_message({"all": True, "matchLabels": LABELS}, "v1.33.0", too_few=3)
    assert said.startswith("waits for all canaries ring=canary")
    assert said.endswith("(only 3 Clusters have those labels now)")


@pytest.mark.django_db
def test_why_of_a_cluster_with_one_run_that_holds_nothing() -> None:
    make_run(cluster="prod/c1", state=Run.State.SUCCEEDED)
    out = io.StringIO()
    call_command("workflows", "why", "prod/c1", stdout=out)
    assert out.getvalue().startswith("nothing holds cluster prod/c1: its one run holds no hook")
