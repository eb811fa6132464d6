"""Requests that once answered 500 are answered as problems: OPTIONS on every route (DRF's
SimpleMetadata built a serializer the action endpoints do not have), a body over Django's
DATA_UPLOAD_MAX_MEMORY_SIZE (413), JSON nested 100k deep (DRF's JSONParser lets the
RecursionError through) and an integer longer than CPython's int() reads.

rest_framework/metadata.py SimpleMetadata.determine_actions calls view.get_serializer();
rest_framework/parsers.py JSONParser.parse catches ValueError only; django/http/request.py
HttpRequest.body raises RequestDataTooBig past DATA_UPLOAD_MAX_MEMORY_SIZE, and DRF reads the
stream itself (rest_framework/request.py Request._load_stream), past that check.
"""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tests.api.conftest import Api, make_token, problem, waiting_run
from workflows.api import urls
from workflows.models import RunEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(api: Api) -> APIClient:
    return api(make_token("admin", ["admin"]))


def _paths(run_id: int) -> list[str]:
    values = {"pk": str(run_id), "name": "gate", "version": "v1.33.0", "namespace": "team-a"}
    found = []
    routes = [str(p.pattern) for p in urls.urlpatterns[:-1] if not hasattr(p, "url_patterns")]
    routes += [urls.PREFIX + str(p.pattern).removeprefix("^") for p in urls.router.urls]
    for route in routes:
        text = route.removeprefix("^").removesuffix("$")
        text = re.sub(r"\(\?P<(\w+)>.*?\)(?=/)", lambda m: values.get(m[1], "team-a-prod"), text)
        text = re.sub(r"<(\w+)>", lambda m: values[m[1]], text).replace(r"\.", ".")
        if "(" not in text:  # the router's format-suffix variants
            found.append("/" + text)
    return found


def test_options_on_every_route_is_answered_without_an_error(admin: APIClient) -> None:
    run = waiting_run("team-a")
    paths = _paths(run.pk)
    assert f"/api/v1/runs/{run.pk}/approve/" in paths
    for path in paths:
        response = admin.options(path)
        assert response.status_code == 200, (path, response.content[:300])
        assert response.json()["schema"] == "/api/v1/openapi.json", path


def test_a_body_larger_than_django_reads_is_413(admin: APIClient) -> None:
    run = waiting_run("team-a")
    size = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1024
    body = '{"step": "approve", "reason": "' + "x" * size + '"}'
    response = admin.post(f"/api/v1/runs/{run.pk}/approve/", body, content_type="application/json")
    assert (response.status_code, problem(response)["code"]) == (413, "payload_too_large")
    assert not RunEvent.objects.filter(kind="action").exists()


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
        ('{"step": "approve", "reason": ' + "9" * 5000 + "}", "a number with too many digits"),
    ],
    ids=["100k deep", "5000-digit integer"],
)
def test_json_python_cannot_read_is_a_parse_error(admin: APIClient, body: str, detail: str) -> None:
    run = waiting_run("team-a")
    response = admin.post(f"/api/v1/runs/{run.pk}/approve/", body, content_type="application/json")
    answer = problem(response)
    assert (response.status_code, answer["code"]) == (400, "parse_error")
    assert detail in answer["detail"]
