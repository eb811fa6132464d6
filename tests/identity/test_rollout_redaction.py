"""A halted gate never names another namespace's cluster to a person whose role may not see
it (invariant 13), on any surface: the fleet page, the run page and its live view,
`/api/v1/runs/{id}/`, `/api/v1/fleet/`, `/api/v1/clusters/.../why/`, `/api/v1/rollouts/` and
`workflows rollout list --as`.

The redaction lives in one place, `workflows.steps.gate.canary_named`: the gate's own
message (which CAPI copies into the Cluster's conditions and every page of the run shows)
names only a canary of the run's namespace; the rollout's halt, read per reader (fleet
banner, rollouts API, `rollout list`), names it to a reader who may view its namespace.

vic views team-a only; pat is an admin (tests/identity/conftest.py). The wave's cluster
waits in team-a; the canary that failed is team-b's.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from tests.identity.conftest import PersonClient
from tests.support import capi
from tests.support import workflows as wf
from tests.workflows import rollouts as two_wave
from workflows.engine import dispatch, scheduling
from workflows.hookpath import answers
from workflows.models import Run

# Committed rows advanced in this process: no worker an earlier test left may advance them
# too (under load one claimed the gate first, and the halt was not there yet to read).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_worker")]

#: The failed canary's name: no page vic sees may carry it.
SECRET = "b-canary-7"
REDACTED = "a canary in another namespace failed workflow canary-health"


def _call(hook: str, namespace: str, name: str, **labels: str) -> answers.Answer:
    cluster = capi.cluster_v1beta2(name=name, namespace=namespace, uid=f"uid-{name}", labels=labels)
    return answers.answer(wf.call(hook, cluster=cluster), handler_name="test")


def _advance_all() -> None:
    for run in Run.objects.filter(state__in=Run.ACTIVE):
        scheduling.advance(run.pk)


@pytest.fixture
def halted(monkeypatch: pytest.MonkeyPatch) -> Run:
    """team-b's canary failed its checks; team-a's main-1 is halted at its gate."""
    monkeypatch.setattr(dispatch, "broker", lambda *args, **kwargs: None)
    two_wave.templates(checks="flaky")
    _call("AfterClusterUpgrade", "team-b", SECRET, ring="canary", health="bad")
    _advance_all()
    assert Run.objects.get(template_name="canary-health").state == Run.State.FAILED
    _call("BeforeClusterUpgrade", "team-a", "main-1", ring="main")
    _advance_all()
    run = Run.objects.get(template_name="wave-main")
    assert "halts the rollout to v1.33.0" in run.message
    return run


def _surfaces(client: Any, run: Run) -> dict[str, str]:
    pages = {
        "fleet page": "/admin/",
        "run page": reverse("admin:workflows_run_change", args=[run.pk]),
        "live view": reverse("admin:workflows_run_live", args=[run.pk]),
        "api run": f"/api/v1/runs/{run.pk}/",
        "api fleet": "/api/v1/fleet/",
        "api why": "/api/v1/clusters/team-a/main-1/why/",
        "api rollouts": "/api/v1/rollouts/",
    }
    found = {}
    for surface, url in pages.items():
        answer = client.get(url, secure=True)
        assert answer.status_code == 200, (surface, answer.status_code)
        found[surface] = answer.content.decode()
    return found


def _listed(who: str) -> str:
    out = io.StringIO()
    call_command("workflows", "rollout", "list", "--as", f"{who}@example.com", stdout=out)
    return out.getvalue()


def test_a_viewer_of_one_namespace_never_sees_the_failed_canary_of_another(
    person: PersonClient, halted: Run
) -> None:
    pages = _surfaces(person("vic"), halted)
    pages["rollout list --as"] = _listed("vic")
    leaks = [surface for surface, text in pages.items() if SECRET in text]
    assert leaks == [], f"{SECRET} shown to vic on {leaks}"
    assert halted.message.startswith(
        f"workflow wave-main halts the rollout to v1.33.0: {REDACTED}; "
    )
    for surface in ("fleet page", "run page", "api run", "api rollouts", "rollout list --as"):
        assert REDACTED in pages[surface], surface


def test_who_may_see_the_canarys_namespace_is_told_which_canary_failed(
    person: PersonClient, halted: Run
) -> None:
    failed = Run.objects.get(template_name="canary-health")
    named = f"canary team-b/{SECRET} failed workflow canary-health (run {failed.pk})"
    pages = _surfaces(person("pat"), halted)
    for surface in ("fleet page", "api rollouts"):
        assert named in pages[surface], surface
    assert _listed("pat").startswith(f"v1.33.0: halts the rollout to v1.33.0: {named}")
    # The run's own message is the same for everyone who sees the run (and CAPI).
    assert SECRET not in pages["run page"]
