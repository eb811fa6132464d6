"""Secrets never leave: a scripted hook call and run, then every place a person can look.

A template's `http` step sends an inline Authorization header and an API key read from
the worker's environment (`headersFromEnv`); the hook call carries a token-like setting.
After the call and the run, the test checks the receiver did get the credentials (so the
scan means something), then scans the log records, the hook answers, the HookCall rows,
the run's rows and the admin pages a staff member opens for the three values.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.support import capi
from tests.support import workflows as wf
from tests.workflows.conftest import Receiver
from workflows import errors
from workflows.engine import scheduling
from workflows.models import HookCall, Run, RunEvent, StepRun
from workflows.operators import redaction
from workflows.steps import registry

AUTHORIZATION = "Bearer ghp_9aQ7xT2mZ4kL8vB1nC6dF3hJ5sR0wY7uE2iO"
API_KEY = "sk-live-51HdXqT7yZ0aB3cD9eF2gH4iJ6kL8mN0pQ"
SETTING_TOKEN = "xoxb-2231-8812-Zq9Wm4Tn7Rp2Ks5Lv8Xy"
SECRETS = (AUTHORIZATION, API_KEY, SETTING_TOKEN)


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


@pytest.mark.django_db
def test_credentials_reach_the_receiver_and_nothing_else(
    client: Client,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("HOOKSVC_TEST_API_KEY", API_KEY)
    settings.HTTP_ENV_ALLOWLIST = frozenset({"HOOKSVC_TEST_API_KEY"})
    wf.template(
        "notify",
        steps=[
            {
                "name": "call",
                "type": "http",
                "with": {
                    "url": receiver.url,
                    "headers": {"Authorization": AUTHORIZATION},
                    "headersFromEnv": {"X-Api-Key": "HOOKSVC_TEST_API_KEY"},
                },
            }
        ],
    )
    request = capi.hook_request("BeforeClusterUpgrade", settings={"token": SETTING_TOKEN})
    path = capi.hook_path("BeforeClusterUpgrade")
    answers = [client.post(path, json.dumps(request), content_type="application/json").content]
    run = Run.objects.get()
    scheduling.advance(run.pk)
    answers.append(client.post(path, json.dumps(request), content_type="application/json").content)

    # The credentials were used: the scan below would find them if they were kept anywhere.
    (received,) = receiver.received
    assert received["headers"]["Authorization"] == AUTHORIZATION
    assert received["headers"]["X-Api-Key"] == API_KEY
    assert json.loads(answers[-1])["retryAfterSeconds"] == 0, "the run finished"

    places: dict[str, str] = {
        "logs": "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records),
        "answers": b"\n".join(answers).decode(),
        "hook calls": repr(list(HookCall.objects.values())),
        "step outputs": repr(list(StepRun.objects.values("output", "message", "memo"))),
        "events": repr(list(RunEvent.objects.values())),
        "run message": run.message,
    }
    staff = User.objects.create_superuser("ops", "ops@example.com", "pw")
    client.force_login(staff)
    for page in (
        "/admin/workflows/run/",
        f"/admin/workflows/run/{run.pk}/change/",
        "/admin/workflows/hookcall/",
        f"/admin/workflows/hookcall/{HookCall.objects.first().pk}/change/",  # type: ignore[union-attr]
    ):
        response = client.get(page, secure=True)
        assert response.status_code == 200, page
        places[page] = response.content.decode()
    assert "[redacted]" in places[f"/admin/workflows/run/{run.pk}/change/"]
    leaks = {where: _leaks(text) for where, text in places.items() if _leaks(text)}
    assert not leaks, f"secrets shown in: {leaks}"


def test_a_password_in_the_url_is_not_in_the_step_error() -> None:
    ctx = registry.StepContext(
        run_id=1,
        step_name="call",
        step_type="http",
        params={"url": "http://user:hunter2@127.0.0.1:9/x", "timeoutSeconds": 1},
        run_context={},
        memo={},
        attempt=1,
    )
    # urllib would never send them (tests/workflows/test_http_step.py); a run whose
    # snapshot has them fails for that reason, naming the host only.
    with pytest.raises(errors.PermanentError) as raised:
        registry.get("http").run(ctx)
    assert "hunter2" not in str(raised.value)
    assert str(raised.value) == (
        "url of 127.0.0.1:9 must not carry credentials (user:password@); put them in headersFromEnv"
    )


def test_a_missing_environment_variable_is_named_not_guessed(settings: Any) -> None:
    settings.HTTP_ENV_ALLOWLIST = frozenset({"HOOKSVC_NOT_SET_ANYWHERE"})
    ctx = registry.StepContext(
        run_id=1,
        step_name="call",
        step_type="http",
        params={"url": "http://127.0.0.1:9/x", "headersFromEnv": {"X": "HOOKSVC_NOT_SET_ANYWHERE"}},
        run_context={},
        memo={},
        attempt=1,
    )
    with pytest.raises(errors.PermanentError, match="HOOKSVC_NOT_SET_ANYWHERE is not set"):
        registry.get("http").run(ctx)


@pytest.mark.parametrize(
    ("shown", "expected"),
    [
        ({"headers": {"X-Trace": "abc"}}, {"headers": {"X-Trace": "[redacted]"}}),
        (
            {"settings": {"apiKey": "k", "profile": "strict"}},
            {"settings": {"apiKey": "[redacted]", "profile": "strict"}},
        ),
        (
            {"steps": [{"with": {"password": {"nested": 1}}}]},
            {"steps": [{"with": {"password": "[redacted]"}}]},
        ),
        (
            {"headersFromEnv": {"X-Api-Key": "ENV_NAME"}},
            {"headersFromEnv": {"X-Api-Key": "ENV_NAME"}},
        ),
    ],
)
def test_redaction_hides_header_values_and_credential_keys(shown: object, expected: object) -> None:
    assert redaction.redact(shown) == expected


@pytest.mark.parametrize("variable", ["DATABASE_URL", "HOOKSVC_SECRET_KEY", "PGPASSWORD"])
def test_a_template_cannot_send_hooksvcs_own_configuration_as_a_header(
    variable: str, settings: Any
) -> None:
    settings.HTTP_ENV_ALLOWLIST = frozenset({variable})  # listed by mistake: still refused
    with pytest.raises(registry.ParamError) as exc:
        registry.validate(
            "http",
            {"url": "https://hooks.example/notify", "headersFromEnv": {"X-Key": variable}},
            hook="BeforeClusterUpgrade",
        )
    assert str(exc.value) == (
        f"headersFromEnv.X-Key: {variable} is hooksvc's own configuration, not a header"
    )


def test_only_variables_the_allowlist_names_may_be_sent(settings: Any) -> None:
    settings.HTTP_ENV_ALLOWLIST = frozenset({"NOTIFY_TOKEN"})
    params = {"url": "https://hooks.example/notify", "headersFromEnv": {"X-Key": "NOTIFY_TOKEN"}}
    assert registry.validate("http", params, hook="BeforeClusterUpgrade")["headersFromEnv"]
    with pytest.raises(registry.ParamError) as exc:
        registry.validate(
            "http",
            {**params, "headersFromEnv": {"X-Key": "AWS_SECRET_ACCESS_KEY"}},
            hook="BeforeClusterUpgrade",
        )
    assert str(exc.value) == (
        "headersFromEnv.X-Key: AWS_SECRET_ACCESS_KEY is not in HOOKSVC_HTTP_ENV_ALLOWLIST"
        " (the variables steps may send)"
    )


def test_a_snapshot_naming_a_variable_off_the_allowlist_sends_nothing(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """A run that started before the allowlist (or on a worker without the name) fails for
    good at the step, and the variable's value reaches no receiver."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", API_KEY)
    settings.HTTP_ENV_ALLOWLIST = frozenset()
    ctx = registry.StepContext(
        run_id=1,
        step_name="call",
        step_type="http",
        params={"url": receiver.url, "headersFromEnv": {"X-Key": "AWS_SECRET_ACCESS_KEY"}},
        run_context={},
        memo={},
        attempt=1,
    )
    with pytest.raises(errors.PermanentError) as raised:
        registry.get("http").run(ctx)
    assert "AWS_SECRET_ACCESS_KEY is not in HOOKSVC_HTTP_ENV_ALLOWLIST" in str(raised.value)
    assert receiver.received == []
