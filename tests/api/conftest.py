"""Fixtures of the REST API's tests: clusters waiting in two namespaces, API tokens of each
role and scope, and a client that sends one."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.support import workflows as wf
from workflows.models import HookCall, Run, StepRun
from workflows.operators import access, tokens

NAMESPACES = ("team-a", "team-b")


def waiting_run(namespace: str, name: str = "", template: str = "gate") -> Run:
    """A run of `namespace`'s cluster waiting for approval at step `approve`."""
    cluster = name or f"{namespace}-prod"
    run = Run.objects.create(
        template_name=template,
        template_generation=1,
        spec=wf.spec(steps=[{"name": "approve", "type": "approval"}]),
        hook="BeforeClusterUpgrade",
        cluster_key=f"uid-{namespace}-{cluster}-{template}",
        cluster_namespace=namespace,
        cluster_name=cluster,
        moment="v1.33.0",
        state="running",
        message=f"workflow {template} is waiting for approval at step approve",
        context={"cluster": {"labels": {"env": "prod"}}},
    )
    StepRun.objects.create(
        run=run, name="approve", position=0, type="approval", state="waiting",
        waits_for_person=True, params={"message": "check the dashboards"},
    )  # fmt: skip
    HookCall.objects.create(
        hook=run.hook, handler="before-cluster-upgrade", cluster_key=run.cluster_key,
        cluster_namespace=namespace, cluster_name=cluster, moment=run.moment,
        status="Success", retry_after=10, message=run.message, latency_ms=1.0,
    )  # fmt: skip
    return run


@pytest.fixture
def runs() -> dict[str, Run]:
    return {namespace: waiting_run(namespace) for namespace in NAMESPACES}


def make_token(
    name: str,
    roles: list[str],
    namespaces: list[str] | None = None,
    lifetime: datetime.timedelta = datetime.timedelta(days=30),
) -> str:
    made = tokens.token_create(
        name=name,
        role_names=roles,
        namespaces=namespaces,
        lifetime=lifetime,
        actor=access.unrestricted("cli:test"),
    )
    return made.secret


#: `api(secret)`: a DRF test client sending `Authorization: Bearer <secret>`.
Api = Callable[[str], APIClient]


@pytest.fixture
def api() -> Api:
    def client(secret: str) -> APIClient:
        made = APIClient()
        made.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        return made

    return client


def problem(response: Any) -> dict[str, Any]:
    """A response's problem details, after checking it is one."""
    assert response["Content-Type"] == "application/problem+json", response.content
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:hooksvc:problem:{body['code']}"
    assert body["status"] == response.status_code
    return body


# The identity tests' real OpenID provider and hooksvc configured for it (one provider per
# session, started the first time a test asks for it).
from tests.identity.conftest import provider, rules_file, signin  # noqa: E402, F401
