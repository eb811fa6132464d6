"""A template's inline credentials are shown nowhere: not by the REST API (list, one, the
answer to a write) nor by the admin's template pages, to any role; a document shown redacted
can be written back as it is and keeps the stored values.

The scan is for the values themselves; `headersFromEnv` names (not secrets) stay visible.
"""

from __future__ import annotations

import html
import json
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from tests.api.conftest import Api, make_token, problem
from tests.support import workflows as wf
from workflows.models import WorkflowTemplate
from workflows.operators import redaction

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _allowed(settings: Any) -> None:
    settings.HTTP_ENV_ALLOWLIST = frozenset({"NOTIFY_TOKEN"})


AUTHORIZATION = "Bearer ghp_Tq4Zr8Wm2Xv6Ny1Lk3Jd5Hf7Gs9Pa0Bc"
API_KEY = "sk-live-7Hd2XqT9yZ4aB1cD6eF8gH3iJ5kL0mN"


def _notify() -> WorkflowTemplate:
    return wf.template(
        "notify",
        steps=[
            {
                "name": "call",
                "type": "http",
                "with": {
                    "url": "https://hooks.example/notify",
                    "headers": {"Authorization": AUTHORIZATION, "X-Api-Key": API_KEY},
                    "headersFromEnv": {"X-Other": "NOTIFY_TOKEN"},
                },
            }
        ],
    )


def _leaks(text: str) -> list[str]:
    return [secret for secret in (AUTHORIZATION, API_KEY) if secret in text]


@pytest.mark.parametrize("role", ["viewer", "releaser", "admin"])
def test_the_api_shows_a_templates_headers_redacted_to_every_role(api: Api, role: str) -> None:
    _notify()
    client = api(make_token(role, [role]))
    listed = client.get("/api/v1/templates/")
    one = client.get("/api/v1/templates/notify/")
    assert (listed.status_code, one.status_code) == (200, 200)
    assert not _leaks(listed.content.decode() + one.content.decode())
    step = one.json()["spec"]["steps"][0]["with"]
    assert step["headers"] == {"Authorization": "[redacted]", "X-Api-Key": "[redacted]"}
    assert step["headersFromEnv"] == {"X-Other": "NOTIFY_TOKEN"}, "a variable's name is shown"


def test_a_document_read_from_the_api_is_written_back_keeping_the_credentials(
    api: Api,
) -> None:
    _notify()
    admin = api(make_token("admin", ["admin"]))
    shown = admin.get("/api/v1/templates/notify/").json()
    document = {
        "apiVersion": "hooksvc/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": "notify"},
        # The steps as shown (the stored spec's nulls are defaults the input refuses).
        "spec": {"hook": shown["hook"], "steps": shown["spec"]["steps"], "retryAfterSeconds": 30},
    }
    written = admin.put("/api/v1/templates/notify/", document, format="json")
    assert written.status_code == 200, written.content
    assert not _leaks(written.content.decode())
    stored = WorkflowTemplate.objects.get(name="notify")
    assert stored.spec["retryAfterSeconds"] == 30
    headers = stored.spec["steps"][0]["with"]["headers"]
    assert headers == {"Authorization": AUTHORIZATION, "X-Api-Key": API_KEY}


def test_a_placeholder_with_no_stored_value_is_refused(api: Api) -> None:
    admin = api(make_token("admin", ["admin"]))
    document = {
        "apiVersion": "hooksvc/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": "fresh"},
        "spec": {
            "hook": "BeforeClusterUpgrade",
            "steps": [
                {
                    "name": "call",
                    "type": "http",
                    "with": {"url": "https://x.example/", "headers": {"X-Api-Key": "[redacted]"}},
                }
            ],
        },
    }
    response = admin.put("/api/v1/templates/fresh/", document, format="json")
    assert response.status_code == 400
    assert json.dumps(problem(response)).count(
        "spec.steps[0].with.headers.X-Api-Key: [redacted] stands for the stored value"
    )
    assert not WorkflowTemplate.objects.filter(name="fresh").exists()


def _admin_pages(client: Client, template: WorkflowTemplate) -> str:
    pages = ""
    for url in (
        reverse("admin:workflows_workflowtemplate_changelist"),
        reverse("admin:workflows_workflowtemplate_change", args=[template.pk]),
    ):
        response = client.get(url, secure=True)
        assert response.status_code == 200, url
        pages += html.unescape(response.content.decode())
    return pages


def test_the_admin_shows_the_document_redacted_and_saving_it_keeps_the_credentials(
    admin_client: Client,
) -> None:
    template = _notify()
    page = _admin_pages(admin_client, template)
    assert not _leaks(page)
    assert "Authorization: '[redacted]'" in page
    # The form's text as shown, saved with a change: the stored credentials stay.
    document = yaml.safe_load(page.split("<textarea", 1)[1].split(">", 1)[1].split("</textarea")[0])
    document["spec"]["retryAfterSeconds"] = 20
    url = reverse("admin:workflows_workflowtemplate_change", args=[template.pk])
    response = admin_client.post(url, {"document": yaml.safe_dump(document), "_save": "Save"})
    assert response.status_code == 302, response.content.decode()
    template.refresh_from_db()
    assert template.spec["retryAfterSeconds"] == 20
    assert template.spec["steps"][0]["with"]["headers"]["X-Api-Key"] == API_KEY


def test_a_viewer_in_the_admin_sees_no_credential(client: Client) -> None:
    template = _notify()
    client.force_login(User.objects.create_user("look", password="x-" * 8, is_staff=True))
    assert not _leaks(_admin_pages(client, template))


def test_restore_matches_steps_by_name_not_position() -> None:
    stored = {"steps": [{"name": "a", "with": {"headers": {"K": "1"}}}, {"name": "b"}]}
    written = {"steps": [{"name": "b"}, {"name": "a", "with": {"headers": {"K": "[redacted]"}}}]}
    restored, missing = redaction.restore(written, stored)
    assert (restored["steps"][1]["with"]["headers"], missing) == ({"K": "1"}, [])


def test_an_api_client_without_the_api_token_sees_nothing(client: Client) -> None:
    _notify()
    assert APIClient().get("/api/v1/templates/notify/").status_code in (401, 403)
