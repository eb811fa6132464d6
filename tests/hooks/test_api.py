"""The hook view's answers when the engine fails, and their bytes, in process."""

from __future__ import annotations

import json

import pytest
from django.db import DataError
from django.test import Client
from rest_framework.renderers import JSONRenderer

from hooksvc.serving import views
from tests.support import capi
from workflows.hookpath import answers
from workflows.models import HookCall


@pytest.mark.django_db
def test_values_the_store_refuses_are_a_failure_not_a_wait_for_an_outage(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> answers.Answer:
        raise DataError("value too long for type character varying(253)")

    monkeypatch.setattr(answers, "answer", refuse)
    response = client.post(
        capi.hook_path("BeforeClusterCreate"),
        json.dumps(capi.hook_request("BeforeClusterCreate")),
        content_type="application/json",
    )
    assert response.json() == {
        "apiVersion": capi.API_VERSION,
        "kind": "BeforeClusterCreateResponse",
        "status": "Failure",
        "message": "request has values the state store cannot hold",
        "retryAfterSeconds": 0,
    }
    assert HookCall.objects.count() == 0


@pytest.mark.parametrize(
    "body",
    [
        {"status": "Success", "message": "déjà vu \u2028 line \u2029 para", "retryAfterSeconds": 5},
        {"detail": 'Method "GET" not allowed.'},
        {"nested": {"list": [1, 2.5, None, True]}, "emoji": "\U0001f600"},
    ],
)
def test_answers_are_the_bytes_drfs_renderer_wrote(body: dict[str, object]) -> None:
    """The views left DRF for speed; CAPI and anyone comparing answers see no change."""
    response = views._json(body)
    assert response.content == JSONRenderer().render(body)
    assert (response["Content-Type"], response["Allow"]) == ("application/json", "POST")


@pytest.mark.parametrize("body", [{"n": float("nan")}, {"n": float("inf")}])
def test_a_number_json_cannot_carry_is_refused_as_drf_refused_it(body: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        views._json(body)
