"""Every error of the REST API is a problem (RFC 9457: application/problem+json with type,
title, status, detail, instance) with a stable `code`, and bad input changes nothing.

RFC 9457 section 3.1 (the members), section 3 (the media type); DRF's own exception
mapping (rest_framework/views.py, `exception_handler`) gives the statuses, which hooksvc
keeps. Throttling counts in the real Redis, per caller (DRF's SimpleRateThrottle).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test.utils import override_settings
from rest_framework.test import APIClient

from tests.api.conftest import Api, make_token, problem, waiting_run
from tests.support import servers
from tests.support import workflows as wf
from workflows.api import problems
from workflows.models import Run, RunEvent, WorkflowTemplate
from workflows.operators import selectors

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(api: Api) -> APIClient:
    return api(make_token("admin", ["admin"]))


def test_input_problems_name_each_field_and_write_nothing(admin: APIClient) -> None:
    run = waiting_run("team-a")
    response = admin.post(f"/api/v1/runs/{run.pk}/approve/", {"reason": ""}, format="json")
    body = problem(response)
    assert (response.status_code, body["code"], body["title"]) == (400, "invalid", "Invalid input")
    assert {(e["field"], e["code"]) for e in body["errors"]} == {
        ("reason", "blank"),
        ("step", "required"),
    }
    assert body["instance"] == f"/api/v1/runs/{run.pk}/approve/"
    assert not RunEvent.objects.filter(kind="action").exists()


def test_a_hints_placeholder_is_no_reason(admin: APIClient) -> None:
    run = waiting_run("team-a")
    body = {"step": "approve", "reason": "<why>"}
    response = admin.post(f"/api/v1/runs/{run.pk}/approve/", body, format="json")
    (error,) = problem(response)["errors"]
    assert error["field"] == "reason" and "placeholder" in error["message"]
    assert not RunEvent.objects.filter(kind="action").exists()


@pytest.mark.parametrize(
    ("request_", "status", "code"),
    [
        ({"method": "post", "data": "{not json", "content_type": "application/json"}, 400,
         "parse_error"),
        ({"method": "post", "data": "reason=x", "content_type": "text/plain"}, 415,
         "unsupported_media_type"),
        ({"method": "get", "HTTP_ACCEPT": "text/html"}, 406, "not_acceptable"),
        ({"method": "delete"}, 405, "method_not_allowed"),
    ],
)  # fmt: skip
def test_protocol_problems(
    admin: APIClient, request_: dict[str, Any], status: int, code: str
) -> None:
    run = waiting_run("team-a")
    call = dict(request_)
    method = call.pop("method")
    path = f"/api/v1/runs/{run.pk}/" if method != "post" else f"/api/v1/runs/{run.pk}/cancel/"
    response = getattr(admin, method)(path, **call)
    assert response.status_code == status
    assert problem(response)["code"] == code
    assert Run.objects.get().state == "running"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"limit": "-5"}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"limit": "9" * 5000}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"offset": "\N{SUPERSCRIPT TWO}"}, "offset"),
    ],
)
@pytest.mark.parametrize("path", ["/api/v1/runs/", "/api/v1/fleet/"])
def test_a_page_it_cannot_read_is_refused_not_replaced_by_another(
    admin: APIClient, path: str, query: dict[str, str], field: str
) -> None:
    """DRF's LimitOffsetPagination reads `?limit=-5` as the default limit (rest_framework/
    pagination.py, get_limit: `_positive_int` raises ValueError, caught, default_limit)."""
    waiting_run("team-a")
    response = admin.get(path, query)
    assert response.status_code == 400, response.content
    (error,) = problem(response)["errors"]
    assert error["field"] == field
    assert "must be a whole number from" in error["message"]
    assert admin.get(path, {"limit": "1", "offset": "0"}).json()["count"] == 1


def test_a_filter_with_a_nul_character_is_refused(admin: APIClient) -> None:
    """PostgreSQL's text type holds no NUL (psycopg refuses to send one): a 400, not a 500
    (schemathesis found `?template=%00`)."""
    response = admin.get("/api/v1/runs/", {"template": "a\x00b"})
    assert response.status_code == 400
    (error,) = problem(response)["errors"]
    assert (error["field"], error["message"]) == ("template", "must not contain a NUL character")


def test_an_action_that_does_not_apply_is_a_conflict(admin: APIClient) -> None:
    run = waiting_run("team-a")
    Run.objects.filter(pk=run.pk).update(state="succeeded")
    response = admin.post(f"/api/v1/runs/{run.pk}/cancel/", {"reason": "late"}, format="json")
    body = problem(response)
    assert (response.status_code, body["code"]) == (409, "not_applicable")
    assert body["detail"] == f"run {run.pk} is already succeeded"


def test_a_template_from_a_kubernetes_resource_changes_only_there(admin: APIClient) -> None:
    template = wf.template("from-git")
    WorkflowTemplate.objects.filter(pk=template.pk).update(managed_by="resource")
    document = {
        "apiVersion": "hooksvc/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": "from-git"},
        "spec": {"hook": "BeforeClusterUpgrade", "steps": [{"name": "a", "type": "noop"}]},
    }
    for response in (
        admin.put("/api/v1/templates/from-git/", document, format="json"),
        admin.delete("/api/v1/templates/from-git/"),
    ):
        body = problem(response)
        assert (response.status_code, body["code"]) == (409, "managed_elsewhere")
        assert "Kubernetes resource" in body["detail"]
    assert WorkflowTemplate.objects.get().spec == template.spec


def test_a_bad_document_is_refused_field_by_field(admin: APIClient) -> None:
    document = {
        "apiVersion": "hooksvc/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": "other"},
        "spec": {"hook": "BeforeClusterUpgrade", "steps": [{"name": "a", "type": "nope"}]},
    }
    response = admin.put("/api/v1/templates/fresh/", document, format="json")
    body = problem(response)
    assert body["code"] == "invalid"
    assert body["errors"][0]["field"] == "document"
    assert "unknown step type 'nope'" in body["errors"][0]["message"]
    assert not WorkflowTemplate.objects.exists()


def test_unknown_paths_and_objects_are_not_found(admin: APIClient) -> None:
    for path in ("/api/v1/runs/123456/", "/api/v1/nothing/", "/api/v1/runs", "/api/v2/runs/"):
        response = admin.get(path)
        assert (response.status_code, problem(response)["code"]) == (404, "not_found"), path
    # A write to a wrong path too (not the CSRF middleware's HTML page).
    browser = APIClient(enforce_csrf_checks=True)
    response = browser.post("/api/v1/bypasses/x/end/", {"reason": "r"}, format="json")
    assert (response.status_code, problem(response)["code"]) == (404, "not_found")


def test_an_unforeseen_error_is_logged_and_answered_without_its_text(
    admin: APIClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run = waiting_run("team-a")

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("password=hunter2 in a message nobody meant to show")

    monkeypatch.setattr(selectors, "run_detail", broken)
    response = admin.get(f"/api/v1/runs/{run.pk}/")
    body = problem(response)
    assert (response.status_code, body["code"]) == (500, "server_error")
    assert "hunter2" not in response.content.decode()
    assert any(r.exc_info and "hunter2" in str(r.exc_info[1]) for r in caplog.records)


def test_a_caller_past_the_rate_is_throttled_alone(api: Api) -> None:
    busy, other = api(make_token("busy", ["viewer"])), api(make_token("other", ["viewer"]))
    with override_settings(API_RATE="3/min"):
        assert [busy.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 200]
        throttled = busy.get("/api/v1/me/")
        body = problem(throttled)
        assert (throttled.status_code, body["code"]) == (429, "throttled")
        assert 0 < int(throttled["Retry-After"]) <= 60
        assert other.get("/api/v1/me/").status_code == 200


def test_every_code_is_documented_with_its_status_and_title() -> None:
    for code, (status, title) in problems.CODES.items():
        body = problems.body(code, "why", "/api/v1/")
        assert (body["status"], body["title"], body["type"]) == (
            status,
            title,
            f"urn:hooksvc:problem:{code}",
        )


def test_a_redis_that_does_not_answer_lets_requests_through(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """The throttle fails open (workflows/api/throttling.py): the API must not go down with
    the broker's Redis, while operators fix it."""
    client = api(make_token("bot", ["viewer"]))
    nowhere = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{servers.free_port()}/0",
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    with override_settings(CACHES=nowhere):
        assert client.get("/api/v1/me/").status_code == 200
    assert any(r.getMessage() == "API throttle not counted" for r in caplog.records)
