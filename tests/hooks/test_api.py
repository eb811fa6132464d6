"""The hook view's answers when the engine fails, in process."""

from __future__ import annotations

import json

import pytest
from django.db import DataError
from django.test import Client

from tests.support import capi
from workflows import engine
from workflows.models import HookCall


@pytest.mark.django_db
def test_values_the_store_refuses_are_a_failure_not_a_wait_for_an_outage(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> engine.Answer:
        raise DataError("value too long for type character varying(253)")

    monkeypatch.setattr(engine, "answer", refuse)
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
