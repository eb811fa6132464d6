"""Operators see and move Machines under in-place update as they do clusters' lifecycles.

UpdateMachine runs are the Machine's Cluster's (namespace and `spec.clusterName`), their
moment the Machine and the digest of its desired spec (hooksvc/contract/machines.py): the
fleet page, a run's page, `workflows why` and the REST API name the Machine; a bypass of
UpdateMachine answers the calls of the Machines its selector matches (the Machine's labels:
the request carries no Cluster) with Success and starts no run, opened from the CLI or the
API; a release, from the CLI or the API, lets that Machine's update go on. CAPI reads
Success with `retryAfterSeconds` 0 as the update done (kubernetes-sigs/cluster-api
core/reconcilers/machine/machine_controller_inplace_update.go, modelled by
tests/support/capi_inplace.py).
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from hooksvc.contract import machines
from tests.api.conftest import make_token
from tests.support import capi
from tests.support import capi_machines as cm
from workflows.definitions import apply, spec
from workflows.models import Bypass, Run

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_inplace_hooks")]

CLUSTER = "fleet/prod-eu-1"


@pytest.fixture
def _inplace_hooks() -> Any:
    document = {
        "apiVersion": "hooksvc/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": "update-kubelet"},
        "spec": {
            "hook": "UpdateMachine",
            "clusterSelector": {"matchLabels": {"inplace": "true"}},
            "retryAfterSeconds": 10,
            "steps": [{"name": "approve", "type": "approval"}],
        },
    }
    apply.templates_apply(documents=spec.parse(json.dumps(document)))
    with override_settings(OPTIONAL_HOOKS="InPlaceUpdates", HOOK_CALL_FLUSH_SECONDS=0):
        yield


def body(name: str, **labels: str) -> dict[str, Any]:
    machine = {"name": name, "labels": {"inplace": "true", **labels}}
    return cm.update_machine(cm.objects(machine=machine))


def update(client: Client, name: str, **labels: str) -> dict[str, Any]:
    """CAPI's UpdateMachine call for Machine fleet/`name` (desired v1.33.0)."""
    response = client.post(
        capi.hook_path("UpdateMachine"),
        json.dumps(body(name, **labels)),
        content_type="application/json",
    )
    answer: dict[str, Any] = response.json()
    return answer


def digest(name: str) -> str:
    found = machines.machine_of(Run.objects.get(moment__startswith=f"{name}@").moment)
    assert found is not None and found[0] == name
    return found[1]


def cli(*args: str) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def api() -> APIClient:
    """The REST API, as an admin's token."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token('ops', ['admin'])}")
    return client


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_workflows_why_the_fleet_a_runs_page_and_the_api_name_each_machine(
    client: Client, admin_client: Client, api: APIClient
) -> None:
    for name in ("md-0-aaaaa", "md-0-bbbbb"):
        assert update(client, name)["retryAfterSeconds"] > 0
    a, b = digest("md-0-aaaaa"), digest("md-0-bbbbb")
    said = cli("why", CLUSTER).splitlines()
    assert said[0] == f"cluster {CLUSTER}: held by 2 runs"
    headings = [line for line in said if line.startswith("UpdateMachine")]
    assert headings == [
        f"UpdateMachine of Machine fleet/{name} (desired spec {spec_digest}): 1 run; CAPI holds"
        " the Machine's in-place update until every run below succeeds or is released"
        for name, spec_digest in (("md-0-aaaaa", a), ("md-0-bbbbb", b))
    ]
    explained = json.loads(cli("why", CLUSTER, "-o", "json"))
    assert [g["machine"] for g in explained["groups"]] == [
        {"namespace": "fleet", "name": "md-0-aaaaa", "desiredSpec": a},
        {"namespace": "fleet", "name": "md-0-bbbbb", "desiredSpec": b},
    ]
    assert api.get(f"/api/v1/clusters/{CLUSTER}/why/").json() == explained

    fleet = text(admin_client.get("/admin/").content.decode())
    assert f"UpdateMachine Machine md-0-aaaaa (desired spec {a})" in fleet
    assert f"UpdateMachine Machine md-0-bbbbb (desired spec {b})" in fleet
    run = Run.objects.get(moment__startswith="md-0-aaaaa@")
    page = admin_client.get(reverse("admin:workflows_run_change", args=[run.pk]))
    assert f"UpdateMachine · Machine md-0-aaaaa (desired spec {a})" in text(page.content.decode())

    listed = api.get("/api/v1/runs/").json()["results"]
    assert sorted((r["machine"]["name"], r["cluster"]["name"]) for r in listed) == [
        ("md-0-aaaaa", "prod-eu-1"),
        ("md-0-bbbbb", "prod-eu-1"),
    ]
    assert json.loads(cli("show", str(run.pk), "-o", "json"))["machine"] == {
        "namespace": "fleet",
        "name": "md-0-aaaaa",
        "desiredSpec": a,
    }


def test_a_bypass_of_update_machine_lets_the_machines_it_selects_go_on_without_a_run(
    client: Client, api: APIClient
) -> None:
    printed = cli(
        "bypass", "--hook", "UpdateMachine", "--selector", "pool=gpu", "--for", "1h",
        "--reason", "CAB-9 driver rollback", "--actor", "cli:ann",
    )  # fmt: skip
    bypass = Bypass.objects.get()
    assert printed.splitlines()[0].startswith(
        f"bypass {bypass.pk} in force until "
    ) and printed.splitlines()[0].endswith(
        "UpdateMachine for clusters matching pool=gpu in every namespace answer Success"
        " without runs"
    )
    covered = update(client, "md-gpu-aaaaa", pool="gpu")
    assert (covered["status"], covered["retryAfterSeconds"]) == ("Success", 0)
    assert covered["message"].startswith(f"hooksvc bypass {bypass.pk} by cli:ann until ")
    assert not Run.objects.filter(moment__startswith="md-gpu-aaaaa@").exists()
    held = update(client, "md-0-aaaaa", pool="cpu")
    assert held["retryAfterSeconds"] > 0, "a Machine the selector does not match is held"

    # The API opens one too, for a namespace.
    opened = api.post(
        "/api/v1/bypasses/",
        {"hook": "UpdateMachine", "duration": "30m", "namespace": "fleet",
         "selector": "pool=cpu", "reason": "CAB-10"},
        format="json",
    )  # fmt: skip
    assert opened.status_code == 201, opened.content
    assert opened.json()["hook"] == "UpdateMachine"
    assert update(client, "md-0-aaaaa", pool="cpu")["retryAfterSeconds"] == 0
    # `workflows why` names it beside the Machine's run, which it leaves as it is.
    [group] = json.loads(cli("why", CLUSTER, "-o", "json"))["groups"]
    assert (group["machine"]["name"], group["bypass"]["reason"]) == ("md-0-aaaaa", "CAB-10")


def test_a_release_from_the_cli_or_the_api_lets_that_machines_update_go_on(
    client: Client, api: APIClient
) -> None:
    for name in ("md-0-aaaaa", "md-0-bbbbb", "md-0-ccccc"):
        assert update(client, name)["retryAfterSeconds"] > 0
    by_cli = Run.objects.get(moment__startswith="md-0-aaaaa@")
    by_api = Run.objects.get(moment__startswith="md-0-bbbbb@")
    cli("release", str(by_cli.pk), "--reason", "updated by hand", "--actor", "cli:ann")
    released = api.post(f"/api/v1/runs/{by_api.pk}/release/", {"reason": "r"}, format="json")
    assert released.status_code == 200, released.content
    for name in ("md-0-aaaaa", "md-0-bbbbb"):
        answer = update(client, name)
        assert (answer["status"], answer["retryAfterSeconds"]) == ("Success", 0), name
    assert update(client, "md-0-ccccc")["retryAfterSeconds"] > 0, "the others stay held"
