"""The permission matrix of the REST API: every endpoint x role x namespace scope.

Callers are API tokens, each scoped like a role rule (workflows.operators.tokens): every
role in every namespace, and the roles that may be limited to one namespace limited to
team-a. Two clusters wait for approval, one in team-a and one in team-b. For each endpoint
and each namespace, the answer must be what the caller's roles say
(workflows.operators.access, the admin's rules): `allowed`, `refused` (403: they see it
but may not do this), or `not visible` (404, or absent from a list); what the tables below
expect is derived from the roles, not from the endpoints.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.addons import profiles
from tests.api.conftest import NAMESPACES, Api, make_token, problem, waiting_run
from tests.support import workflows as wf
from workflows.models import AddonProfile, Bypass, Run, RunEvent, WorkflowTemplate
from workflows.operators import bypasses

pytestmark = pytest.mark.django_db

ALLOWED, REFUSED, HIDDEN = "allowed", "refused", "not visible"
#: Callers: (roles, namespaces or None for every namespace).
CALLERS = {
    "viewer": (["viewer"], None),
    "viewer@team-a": (["viewer"], ["team-a"]),
    "operator": (["operator"], None),
    "operator@team-a": (["operator"], ["team-a"]),
    "releaser": (["releaser"], None),
    "releaser@team-a": (["releaser"], ["team-a"]),
    "editor": (["editor"], None),
    "admin": (["admin"], None),
}
#: What each role grants, as docs/sign-in.md's table says.
GRANTS = {
    "viewer": {"view"},
    "operator": {"view", "operate"},
    "releaser": {"view", "release"},
    "editor": {"view", "edit"},
    "admin": {"view", "operate", "release", "edit"},
}


def where(caller: str, permission: str) -> set[str]:
    """The namespaces (of the two) where `caller` has `permission`."""
    roles, scope = CALLERS[caller]
    if not any(permission in GRANTS[role] for role in roles):
        return set()
    return set(NAMESPACES) if scope is None else set(scope)


def expected(caller: str, permission: str, namespace: str) -> str:
    if namespace not in where(caller, "view"):
        return HIDDEN
    return ALLOWED if namespace in where(caller, permission) else REFUSED


def outcome(response: Any, allowed: tuple[int, ...] = (200, 201, 204)) -> str:
    if response.status_code in allowed:
        return ALLOWED
    assert response.status_code in (403, 404), response.content
    code = problem(response)["code"]
    assert code == ("permission_denied" if response.status_code == 403 else "not_found")
    return REFUSED if response.status_code == 403 else HIDDEN


@pytest.fixture
def callers() -> dict[str, APIClient]:
    clients = {}
    for name, (roles, namespaces) in CALLERS.items():
        client = APIClient()
        secret = make_token(name.replace("@", "-at-"), roles, namespaces)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        clients[name] = client
    return clients


@pytest.fixture
def world() -> dict[str, Any]:
    """The two waiting runs, a bypass per namespace, a template and a profile of the
    operators' (hooksvc's own)."""
    runs = {ns: waiting_run(ns) for ns in NAMESPACES}
    opened = {
        ns: bypasses.bypass_open(
            hook="BeforeClusterUpgrade",
            duration=bypasses.parse_duration("1h"),
            namespace=ns,
            actor="cli:setup",
            reason="drill",
        )
        for ns in NAMESPACES
    }
    return {"runs": runs, "bypasses": opened}


def listed(response: Any, namespace_of: Callable[[dict[str, Any]], str]) -> set[str]:
    assert response.status_code == 200, response.content
    return {namespace_of(item) for item in response.json()["results"]}


def _post(client: APIClient, path: str, body: dict[str, Any]) -> Any:
    return client.post(path, body, format="json")


REASON = {"reason": "CAB-7"}
#: Each action on one run: its path's last part, its body, the permission it needs.
RUN_ACTIONS = {
    "approve": ({"step": "approve", **REASON}, "operate"),
    "skip": ({"step": "approve", **REASON}, "operate"),
    "retry": (REASON, "operate"),
    "cancel": (REASON, "operate"),
    "release": (REASON, "release"),
}


@pytest.mark.parametrize("caller", CALLERS)
def test_reads_show_only_the_namespaces_a_caller_may_view(
    callers: dict[str, APIClient], world: dict[str, Any], caller: str
) -> None:
    client, sees = callers[caller], where(caller, "view")
    runs = world["runs"]
    assert listed(client.get("/api/v1/runs/"), lambda r: r["cluster"]["namespace"]) == sees
    assert listed(client.get("/api/v1/fleet/"), lambda r: r["cluster"]["namespace"]) == sees
    counts = client.get("/api/v1/fleet/counts/").json()
    assert (counts["held_awaiting_approval"], counts["held"]) == (len(sees), len(sees))
    assert client.get("/api/v1/fleet/background/").json()["count"] == 0
    assert listed(client.get("/api/v1/bypasses/"), lambda b: b["namespace"]) == sees
    for ns in NAMESPACES:
        want = ALLOWED if ns in sees else HIDDEN
        assert outcome(client.get(f"/api/v1/runs/{runs[ns].pk}/")) == want
        assert outcome(client.get(f"/api/v1/bypasses/{world['bypasses'][ns].pk}/")) == want
        why = client.get(f"/api/v1/clusters/{ns}/{runs[ns].cluster_name}/why/")
        assert outcome(why) == want
        if want == ALLOWED:
            (group,) = why.json()["groups"]
            assert [r["run"]["id"] for r in group["runs"]] == [runs[ns].pk]
    me = client.get("/api/v1/me/").json()
    assert me["name"] == f"token:{caller.replace('@', '-at-')}"
    assert me["grants"]["view"] == (None if CALLERS[caller][1] is None else ["team-a"])


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("action", RUN_ACTIONS)
def test_each_run_action_is_allowed_refused_or_not_visible_by_role_and_namespace(
    callers: dict[str, APIClient], world: dict[str, Any], caller: str, action: str
) -> None:
    body, permission = RUN_ACTIONS[action]
    for ns, run in world["runs"].items():
        got = outcome(_post(callers[caller], f"/api/v1/runs/{run.pk}/{action}/", body))
        assert got == expected(caller, permission, ns), (ns, action)
        recorded = RunEvent.objects.filter(run=run, kind="action", name=action).exists()
        # A retry of a run going on changes nothing even where allowed (already running).
        assert recorded == (got == ALLOWED and action != "retry"), (ns, action)


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("scope", ["ids", "filter"])
def test_bulk_actions_act_only_where_the_caller_may(
    callers: dict[str, APIClient], world: dict[str, Any], caller: str, scope: str
) -> None:
    runs = world["runs"]
    body: dict[str, Any] = {"action": "approve", **REASON}
    chosen: dict[str, Any] = {"ids": [r.pk for r in runs.values()]}
    body.update(chosen if scope == "ids" else {"filter": {}})
    response = _post(callers[caller], "/api/v1/runs/bulk/", body)
    operates = where(caller, "operate")
    if not operates:
        assert outcome(response) == REFUSED
    else:
        assert response.status_code == 200, response.content
        done = {o["cluster"].split("/")[0] for o in response.json()["outcomes"] if o["ok"]}
        assert done == operates
    approved = {
        ns
        for ns, run in runs.items()
        if RunEvent.objects.filter(run=run, kind="action", name="approve").exists()
    }
    assert approved == operates


@pytest.mark.parametrize("caller", CALLERS)
def test_bypasses_open_and_end_where_the_caller_releases(
    callers: dict[str, APIClient], world: dict[str, Any], caller: str
) -> None:
    client = callers[caller]
    for ns in NAMESPACES:
        opened = _post(
            client,
            "/api/v1/bypasses/",
            {"hook": "BeforeClusterDelete", "duration": "30m", "namespace": ns, **REASON},
        )
        # Opening needs the right to release there; seeing the namespace is not asked.
        want = ALLOWED if ns in where(caller, "release") else REFUSED
        assert outcome(opened) == want, ns
        ended = _post(client, f"/api/v1/bypasses/{world['bypasses'][ns].pk}/end/", REASON)
        assert outcome(ended) == expected(caller, "release", ns), ns
    everywhere = _post(
        client, "/api/v1/bypasses/", {"hook": "BeforeClusterDelete", "duration": "30m", **REASON}
    )
    assert outcome(everywhere) == (
        ALLOWED if where(caller, "release") == set(NAMESPACES) and CALLERS[caller][1] is None
        else REFUSED
    )  # fmt: skip
    assert Bypass.objects.filter(hook="BeforeClusterDelete").count() == (
        len(where(caller, "release")) + (1 if outcome(everywhere) == ALLOWED else 0)
    )


def _template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "hooksvc/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": name},
        "spec": {"hook": "BeforeClusterUpgrade", "steps": [{"name": "a", "type": "noop"}]},
    }


def _profile(name: str) -> dict[str, Any]:
    return profiles.profile(name)


@pytest.mark.parametrize("caller", CALLERS)
def test_templates_and_profiles_are_read_by_all_and_written_by_editors(
    callers: dict[str, APIClient], world: dict[str, Any], caller: str
) -> None:
    client = callers[caller]
    wf.template("gate", steps=[{"name": "approve", "type": "approval"}])
    edits = where(caller, "edit") == set(NAMESPACES)
    want = ALLOWED if edits else REFUSED
    assert outcome(client.get("/api/v1/templates/gate/")) == ALLOWED
    assert outcome(client.get("/api/v1/profiles/")) == ALLOWED
    assert (
        outcome(client.put("/api/v1/templates/fresh/", _template("fresh"), format="json")) == want
    )
    assert outcome(client.delete("/api/v1/templates/gate/")) == want
    assert outcome(client.put("/api/v1/profiles/base/", _profile("base"), format="json")) == want
    assert WorkflowTemplate.objects.filter(name="fresh").exists() == edits
    assert WorkflowTemplate.objects.filter(name="gate").exists() != edits
    assert AddonProfile.objects.filter(name="base").exists() == edits
    if edits:
        assert outcome(client.delete("/api/v1/profiles/base/")) == ALLOWED
        assert not WorkflowTemplate.objects.filter(name__endswith="-base").exists()


def test_a_caller_without_a_credential_is_asked_for_one(world: dict[str, Any]) -> None:
    run = world["runs"]["team-a"]
    for method, path in (
        ("get", "/api/v1/runs/"),
        ("get", "/api/v1/fleet/"),
        ("post", f"/api/v1/runs/{run.pk}/approve/"),
        ("get", "/api/v1/me/"),
    ):
        response = getattr(APIClient(), method)(path)
        assert response.status_code == 401
        assert problem(response)["code"] == "not_authenticated"
        assert response["WWW-Authenticate"] == 'Bearer realm="hooksvc"'
    assert not RunEvent.objects.filter(kind="action").exists()


@pytest.mark.parametrize("caller", CALLERS)
def test_rollouts_are_resumed_and_abandoned_by_who_releases_everywhere(
    callers: dict[str, APIClient], caller: str
) -> None:
    """A rollout spans namespaces: its resume and abandon need the release permission in
    every one (workflows.operators.rollouts), as a bypass for every namespace does."""
    client = callers[caller]
    listed = client.get("/api/v1/rollouts/")
    assert listed.status_code == 200 and listed.json()["results"] == []
    everywhere = where(caller, "release") == set(NAMESPACES) and CALLERS[caller][1] is None
    abandoned = _post(client, "/api/v1/rollouts/v1.33.0/abandon/", REASON)
    assert outcome(abandoned) == (ALLOWED if everywhere else REFUSED)
    # Nothing halts it: a resume does not apply (409) for who may, 403 for who may not.
    resumed = _post(client, "/api/v1/rollouts/v1.33.0/resume/", REASON)
    if everywhere:
        assert resumed.status_code == 409, resumed.content
        assert problem(resumed)["code"] == "not_applicable"
        assert abandoned.json()["kind"] == "abandon" and abandoned.json()["reason"] == "CAB-7"
    else:
        assert outcome(resumed) == REFUSED


def test_every_route_of_the_api_is_in_the_matrix() -> None:
    """The tests above reach every path of the document; a new endpoint must join them."""
    from workflows.api import urls

    covered = {
        "me/", "fleet/", "fleet/counts/", "fleet/background/", "clusters/<namespace>/<name>/why/",
        "runs/", "runs/<pk>/", "runs/<pk>/approve/", "runs/<pk>/retry/", "runs/<pk>/skip/",
        "runs/<pk>/cancel/", "runs/<pk>/release/", "runs/bulk/", "bypasses/", "bypasses/<pk>/",
        "bypasses/<pk>/end/", "templates/", "templates/<name>/", "profiles/", "profiles/<name>/",
        "rollouts/", "rollouts/<version>/resume/", "rollouts/<version>/abandon/", "openapi.json",
    }  # fmt: skip
    routes = {_route(p) for p in urls.urlpatterns[:-1] if not hasattr(p, "url_patterns")}
    routes |= {_route(p) for p in urls.router.urls}
    assert routes == covered


def _route(pattern: Any) -> str:
    text = str(pattern.pattern).removeprefix("^").removesuffix("$").removeprefix("api/v1/")
    return re.sub(r"\(\?P<(\w+)>.*?\)(?=/)", r"<\1>", text)


def test_the_run_list_answers_as_the_runs_are(api: Api) -> None:
    runs = {ns: waiting_run(ns) for ns in NAMESPACES}
    Run.objects.filter(pk=runs["team-b"].pk).update(state="failed")
    client = api(make_token("all", ["viewer"]))
    failed = client.get("/api/v1/runs/", {"state": "failed"}).json()["results"]
    assert [r["id"] for r in failed] == [runs["team-b"].pk]
    bad = client.get("/api/v1/runs/", {"state": "broken"})
    assert bad.status_code == 400
    assert problem(bad)["errors"][0]["field"] == "state"
