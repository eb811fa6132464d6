"""A browser's session on the REST API: the admin's sign-in works there too (a local account
or a person who signed in through the provider), and every write needs Django's CSRF token,
as DRF's SessionAuthentication enforces it (rest_framework/authentication.py,
`SessionAuthentication.enforce_csrf`)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from tests.api.conftest import problem, waiting_run
from tests.identity.conftest import sign_in
from tests.support import oidc
from workflows.models import RunEvent

pytestmark = pytest.mark.django_db


def _browser(user: User) -> APIClient:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def test_a_session_reads_and_a_write_without_the_csrf_token_is_refused() -> None:
    run = waiting_run("team-a")
    client = _browser(User.objects.create_superuser("root", "root@example.com", "pw-" * 4))
    assert client.get("/api/v1/runs/", secure=True).status_code == 200
    body = {"step": "approve", "reason": "CAB-7"}
    forged = client.post(f"/api/v1/runs/{run.pk}/approve/", body, format="json", secure=True)
    assert forged.status_code == 403
    assert problem(forged)["code"] == "csrf_failed"
    assert not RunEvent.objects.filter(kind="action").exists()
    # The admin's page sets the CSRF cookie; the script sends it back in the header.
    client.get("/admin/", secure=True)
    csrf = client.cookies["csrftoken"].value
    done = client.post(
        f"/api/v1/runs/{run.pk}/approve/",
        body,
        format="json",
        secure=True,
        HTTP_X_CSRFTOKEN=csrf,
        HTTP_REFERER="https://testserver/admin/",
    )
    assert done.status_code == 200, done.content
    assert RunEvent.objects.get(kind="action").actor == "api:root"


def test_a_person_signed_in_through_the_provider_has_their_roles_on_the_api(
    signin: oidc.Provider,
) -> None:
    runs = {ns: waiting_run(ns) for ns in ("team-a", "team-b")}
    browser = Client()
    sign_in(browser, signin, "sub-vic")
    listed = browser.get("/api/v1/runs/", secure=True).json()["results"]
    assert {r["id"] for r in listed} == {runs["team-a"].pk}
    me = browser.get("/api/v1/me/", secure=True).json()
    assert (me["name"], me["credential"], me["grants"]["operate"]) == (
        "api:vic@example.com",
        "session",
        [],
    )


def test_a_staff_account_without_a_role_is_refused_and_an_anonymous_one_asked_to_sign_in() -> None:
    nobody = User.objects.create_user("guest", password="pw-" * 4)
    refused = _browser(nobody).get("/api/v1/runs/", secure=True)
    assert refused.status_code == 403
    assert problem(refused)["code"] == "permission_denied"
    anonymous = APIClient().get("/api/v1/runs/", secure=True)
    assert problem(anonymous)["code"] == "not_authenticated"
