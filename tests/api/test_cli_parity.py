"""`manage.py workflows` and the REST API give the same answers: both call the same service
functions (workflows.operators.selectors, bypasses, actions), and this compares what they
print and answer, for the shell's unrestricted CLI and for a person (`--as`, and the same
person's token from the identity provider)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from tests.api.conftest import Api, make_token, waiting_run
from tests.identity.conftest import sign_in
from tests.support import oidc
from workflows import clock
from workflows.models import Run, StepRun
from workflows.operators import bypasses

pytestmark = pytest.mark.django_db


def cli(*args: str) -> Any:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def fleet() -> list[Run]:
    made = [waiting_run(ns, name=f"{ns}-{i}") for ns in ("team-a", "team-b") for i in range(2)]
    Run.objects.filter(pk=made[1].pk).update(state="failed", message="workflow gate failed")
    StepRun.objects.filter(run=made[1]).update(state="failed", message="boom")
    Run.objects.filter(pk=made[2].pk).update(state="succeeded")
    for namespace in ("", "team-b"):
        bypasses.bypass_open(
            hook="BeforeClusterUpgrade",
            duration=bypasses.parse_duration("1h"),
            namespace=namespace,
            actor="cli:setup",
            reason="drill",
        )
    return made


def _results(client: Any, path: str, **query: str) -> list[dict[str, Any]]:
    response = client.get(path, {"limit": "500", **query})
    assert response.status_code == 200, response.content
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def test_lists_shows_and_bypasses_are_the_same(
    api: Api, fleet: list[Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both answer "held for" relative to now: one held clock, so a second that passes between
    # the two calls of a slow machine is not a difference.
    held_now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: held_now)
    client = api(make_token("admin", ["admin"]))
    assert json.loads(cli("list", "-o", "json")) == _results(client, "/api/v1/runs/")
    for state in ("failed", "awaiting_approval", "succeeded"):
        assert json.loads(cli("list", "--state", state, "-o", "json")) == _results(
            client, "/api/v1/runs/", state=state
        )
    assert json.loads(cli("list", "--cluster", "team-b/team-b-1", "-o", "json")) == _results(
        client, "/api/v1/runs/", namespace="team-b", name="team-b-1"
    )
    for run in fleet:
        shown = json.loads(cli("show", str(run.pk), "-o", "json"))
        assert shown == client.get(f"/api/v1/runs/{run.pk}/").json()
    listed = json.loads(cli("bypass", "--list", "-o", "json"))
    assert listed == _results(client, "/api/v1/bypasses/")
    assert len(listed) == 2
    for run in fleet:
        cluster = f"{run.cluster_namespace}/{run.cluster_name}"
        explained = json.loads(cli("why", cluster, "-o", "json"))
        assert explained == client.get(f"/api/v1/clusters/{cluster}/why/").json()
    # A held cluster's ways out, with a bypass in force over it.
    explained = json.loads(cli("why", "team-b/team-b-1", "-o", "json"))
    assert explained["held"] and explained["groups"][0]["bypass"]["reason"] == "drill"


def test_an_action_done_twice_says_the_same_on_both(api: Api, fleet: list[Run]) -> None:
    client = api(make_token("admin", ["admin"]))
    run = fleet[0]
    client.post(f"/api/v1/runs/{run.pk}/release/", {"reason": "r"}, format="json")
    printed = cli("release", str(run.pk), "--reason", "again").strip()
    answered = client.post(f"/api/v1/runs/{run.pk}/release/", {"reason": "again"}, format="json")
    assert (
        printed
        == answered.json()["detail"]
        == (f"run {run.pk} is already released: nothing changed")
    )


def test_a_person_sees_the_same_through_the_cli_and_their_token(
    signin: oidc.Provider, api: Api, fleet: list[Run]
) -> None:
    sign_in(Client(), signin, "sub-ann")  # the CLI knows ann by the groups of a sign-in
    client = api(signin.token("sub-ann")["id_token"])
    as_ann = ("--as", "ann@example.com")
    listed = json.loads(cli("list", "-o", "json", *as_ann))
    assert listed == _results(client, "/api/v1/runs/")
    assert {r["cluster"]["namespace"] for r in listed} == {"team-a"}
    assert json.loads(cli("bypass", "--list", "-o", "json", *as_ann)) == _results(
        client, "/api/v1/bypasses/"
    )
