"""`manage.py workflows preview --upgrade-to`: a dry run of a whole upgrade.

Every hook call CAPI makes for the plan it sends in BeforeClusterUpgrade, in CAPI's order
(kubernetes-sigs/cluster-api `exp/topology/desiredstate/lifecycle_hooks.go` and
`desired_state.go` `computeControlPlaneVersion`, `reconcile_state.go` for
AfterClusterUpgrade; the order tests/support/capi_client.py's `lifecycle` models, which
this test compares against), the templates each would run, the least time each takes,
and the windows and gates it would wait for, with the engine's clock held. Writes nothing.
"""

from __future__ import annotations

import datetime
import io
import json
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from tests.support import capi, capi_client
from tests.support import workflows as wf
from tests.support.servers import ROOT
from workflows.models import Run

pytestmark = pytest.mark.django_db

PLAN = ("--control-plane-plan", "v1.31.0,v1.32.3,v1.33.0", "--workers-plan", "v1.32.3,v1.33.0")
MONDAY_NOON_BERLIN = datetime.datetime(2026, 11, 23, 11, tzinfo=datetime.UTC)


@pytest.fixture
def fleet(now: list[datetime.datetime]) -> None:
    """examples/rollouts.yaml applied, and a two-minute settle after each control plane step."""
    now[0] = MONDAY_NOON_BERLIN
    call_command(
        "apply_workflows", "-f", str(ROOT / "examples" / "rollouts.yaml"), stdout=io.StringIO()
    )
    wf.template(
        "settle-control-plane",
        hook="AfterControlPlaneUpgrade",
        steps=[{"name": "settle", "type": "wait", "with": {"seconds": 120}}],
    )


def _cluster(tmp_path: Path, **labels: str) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(capi.cluster_v1beta2(labels=labels)))
    return str(path)


def preview(*args: str) -> str:
    out = io.StringIO()
    call_command("workflows", "preview", *args, stdout=out)
    return out.getvalue()


@pytest.mark.usefixtures("fleet")
def test_it_lists_every_call_of_the_plan_in_capis_order(tmp_path: Path) -> None:
    text = preview("--cluster", _cluster(tmp_path, ring="main"), "--upgrade-to", "v1.33.0", *PLAN)
    calls = [line.split(". ", 1)[1] for line in text.splitlines() if line[:1].isdigit()]
    modelled = [s.label for s in capi_client.lifecycle()]
    upgrade = modelled[modelled.index("BeforeClusterUpgrade v1.30.0->v1.33.0") :]
    assert calls == [*upgrade[:-2], "AfterClusterUpgrade v1.33.0"]
    assert len(calls) == 12
    assert not Run.objects.exists(), "a dry run starts nothing"


@pytest.mark.usefixtures("fleet")
def test_it_names_the_templates_their_least_time_and_the_window_and_gate_they_wait_for(
    tmp_path: Path,
) -> None:
    text = preview("--cluster", _cluster(tmp_path, ring="main"), "--upgrade-to", "v1.33.0", *PLAN)
    lines = text.splitlines()
    assert lines[0] == "upgrade of fleet/prod-eu-1 from v1.30.0 to v1.33.0: 12 hook calls"
    assert lines[1:8] == [
        "1. BeforeClusterUpgrade v1.30.0->v1.33.0",
        "   workflowtemplate/prod-upgrade-window: at least 0 s; steps window (window)",
        "     step window: waits for the maintenance window Tue 02:00 Europe/Berlin "
        "(in 14 h 00 min)",
        "   workflowtemplate/upgrade-after-canaries: at least 0 s; steps canaries (gate)",
        "     step canaries: waits for 2 canaries ring=canary to pass AfterClusterUpgrade "
        "at v1.33.0 and soak 3600 s: 0 of 2 canaries finished now",
        "2. BeforeControlPlaneUpgrade v1.30.0->v1.31.0",
        "   no template matches: it proceeds at once",
    ]
    assert lines[8:10] == [
        "3. AfterControlPlaneUpgrade v1.31.0",
        "   workflowtemplate/settle-control-plane: at least 2 min; steps settle (wait)",
    ]
    assert lines[-1] == (
        "least time of the workflows in all: 6 min, plus the windows and gates above and "
        "CAPI's own rollouts"
    )


@pytest.mark.usefixtures("fleet")
def test_inside_a_window_it_says_when_the_window_closes(
    tmp_path: Path, now: list[datetime.datetime]
) -> None:
    now[0] = datetime.datetime(2026, 11, 24, 3, tzinfo=datetime.UTC)  # Tue 04:00 Berlin
    text = preview("--cluster", _cluster(tmp_path), "--upgrade-to", "v1.33.0", "-o", "json")
    first = json.loads(text)[0]
    assert first["call"] == "BeforeClusterUpgrade v1.30.0->v1.33.0"
    assert first["templates"] == [
        {
            "name": "prod-upgrade-window",
            "leastSeconds": 0.0,
            "steps": ["window (window)"],
            "waits": ["step window: inside a maintenance window now (it closes in 1 h 00 min)"],
        }
    ]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("--workers-plan", "v1.32.0"), "workers can only upgrade to control plane steps"),
        (("--control-plane-plan", "v1.31.0"), "the control plane's last step must be the target"),
        (("--hook", "BeforeClusterUpgrade"), "give --hook for one call or --upgrade-to"),
        (("--to", "v1.33.0"), "--upgrade-to takes its versions from the Cluster and the plan"),
    ],
)
def test_a_plan_that_makes_no_sense_is_refused(
    tmp_path: Path, args: tuple[str, ...], error: str
) -> None:
    with pytest.raises(CommandError, match=error):
        preview("--cluster", _cluster(tmp_path), "--upgrade-to", "v1.33.0", *args)
