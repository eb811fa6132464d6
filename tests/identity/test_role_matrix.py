"""The role matrix: people signed in through a real OpenID provider, each with the roles their
groups give (tests/identity/conftest.py), against the admin's pages, bulk actions and forged
POSTs, and `manage.py workflows --as`.

Two clusters wait for approval, one in team-a and one in team-b. ann operates team-a; vic
views team-a; sam releases (and opens bypasses) everywhere; pat is an admin; nobody's groups
match no rule. Each table says, per person, which namespaces' runs a page shows or an action
changes; everything else must be neither shown nor changed.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from tests.identity.conftest import PersonClient
from tests.support import workflows as wf
from workflows.models import Bypass, HookCall, Run, RunEvent, StepRun, WorkflowTemplate

pytestmark = pytest.mark.django_db

NAMESPACES = ("team-a", "team-b")
BOTH = set(NAMESPACES)
#: Which namespaces' runs each person sees.
SEES = {"ann": {"team-a"}, "vic": {"team-a"}, "sam": BOTH, "pat": BOTH, "nobody": set()}
#: Where each person may approve, retry, skip or cancel.
OPERATES = {"ann": {"team-a"}, "vic": set(), "sam": set(), "pat": BOTH, "nobody": set()}
#: Where each person may release a hold.
RELEASES = {"ann": set(), "vic": set(), "sam": BOTH, "pat": BOTH, "nobody": set()}
PEOPLE = tuple(SEES)


def waiting_run(namespace: str) -> Run:
    run = Run.objects.create(
        template_name="gate",
        template_generation=1,
        spec=wf.spec(),
        hook="BeforeClusterUpgrade",
        cluster_key=f"uid-{namespace}",
        cluster_namespace=namespace,
        cluster_name=f"{namespace}-prod",
        moment="v1.33.0",
        state="running",
        message="workflow gate is waiting for approval at step approve",
    )
    StepRun.objects.create(
        run=run, name="approve", position=0, type="approval", state="waiting",
        waits_for_person=True,
    )  # fmt: skip
    HookCall.objects.create(
        hook=run.hook, handler="before-upgrade", cluster_key=run.cluster_key,
        cluster_namespace=namespace, cluster_name=run.cluster_name, moment=run.moment,
        status="Success", retry_after=10, message=run.message, latency_ms=1.0,
    )  # fmt: skip
    return run


@pytest.fixture
def runs() -> dict[str, Run]:
    return {namespace: waiting_run(namespace) for namespace in NAMESPACES}


def shown(page: str, runs: dict[str, Run]) -> set[str]:
    return {ns for ns, run in runs.items() if run.cluster_name in page}


def approved(runs: dict[str, Run]) -> set[str]:
    return {
        ns
        for ns, run in runs.items()
        if RunEvent.objects.filter(run=run, kind="action", name="approve").exists()
    }


@pytest.mark.parametrize("who", PEOPLE)
@pytest.mark.parametrize(
    "page",
    ["fleet", "run list", "hook calls", "run pages", "cluster pages", "fleet filter menu"],
)
def test_each_page_shows_only_the_namespaces_a_person_may_view(
    person: PersonClient, runs: dict[str, Run], who: str, page: str
) -> None:
    client = person(who)
    if not SEES[who]:
        assert client.get("/admin/").status_code == 302  # to the sign-in page
        assert client.get(reverse("admin:workflows_run_changelist")).status_code == 302
        return
    if page == "fleet":
        html = client.get("/admin/").content.decode()
        assert shown(html, runs) == SEES[who]
        counts = html[html.index('id="fleet-counts"') :]
        waiting = counts[counts.index('data-state="awaiting_approval"') :]
        assert f"<strong>{len(SEES[who])}</strong>" in waiting[:300]
    elif page == "run list":
        html = client.get(reverse("admin:workflows_run_changelist")).content.decode()
        assert shown(html, runs) == SEES[who]
    elif page == "hook calls":
        html = client.get(reverse("admin:workflows_hookcall_changelist")).content.decode()
        assert shown(html, runs) == SEES[who]
    elif page == "run pages":
        for ns, run in runs.items():
            for url in (
                reverse("admin:workflows_run_change", args=[run.pk]),
                reverse("admin:workflows_run_live", args=[run.pk]),
            ):
                assert client.get(url).status_code == (200 if ns in SEES[who] else 404), url
    elif page == "cluster pages":
        for ns, run in runs.items():
            url = reverse("admin:cluster", args=[ns, run.cluster_name])
            assert client.get(url).status_code == (200 if ns in SEES[who] else 404)
    else:
        html = client.get("/admin/").content.decode()
        menu = html[html.index('name="namespace"') :]
        menu = menu[: menu.index("</select>")]
        assert {ns for ns in NAMESPACES if f"<option>{ns}</option>" in menu} == SEES[who]


@pytest.mark.parametrize("who", PEOPLE)
def test_a_forged_approval_acts_only_where_the_person_operates(
    person: PersonClient, runs: dict[str, Run], who: str
) -> None:
    for run in runs.values():
        url = reverse("admin:workflows_run_step_action", args=[run.pk, "approve", "approve"])
        person(who).post(url, {"reason": "forged"})
    assert approved(runs) == OPERATES[who]
    for event in RunEvent.objects.filter(kind="action"):
        assert (event.actor, event.actor_subject, event.actor_email) == (
            f"admin:{who}@example.com",
            f"sub-{who}",
            f"{who}@example.com",
        )


@pytest.mark.parametrize("who", PEOPLE)
@pytest.mark.parametrize("action", ["cancel", "release"])
def test_a_forged_run_action_acts_only_where_the_role_allows(
    person: PersonClient, runs: dict[str, Run], who: str, action: str
) -> None:
    for run in runs.values():
        person(who).post(
            reverse("admin:workflows_run_action", args=[run.pk, action]), {"reason": "forged"}
        )
    changed = {
        ns
        for ns, run in runs.items()
        if RunEvent.objects.filter(run=run, kind="action", name=action).exists()
    }
    assert changed == (OPERATES if action == "cancel" else RELEASES)[who]


@pytest.mark.parametrize("who", PEOPLE)
@pytest.mark.parametrize("scope", ["ticked", "filter"])
def test_a_bulk_approval_acts_only_where_the_person_operates(
    person: PersonClient, runs: dict[str, Run], who: str, scope: str
) -> None:
    form = {"action": "approve", "confirmed": "1", "reason": "CAB-1"}
    if scope == "ticked":
        # Forged: the ids of both runs, whatever the page showed.
        form["run"] = [str(run.pk) for run in runs.values()]  # type: ignore[assignment]
    else:
        form["scope"] = "filter"
    person(who).post(reverse("admin:fleet_bulk"), form)
    assert approved(runs) == OPERATES[who]


@pytest.mark.parametrize("who", PEOPLE)
def test_the_fleet_and_run_pages_offer_only_the_actions_a_person_may_take(
    person: PersonClient, runs: dict[str, Run], who: str
) -> None:
    if not SEES[who]:
        return
    fleet = person(who).get("/admin/").content.decode()
    offered = {a for a in ("approve", "retry", "release", "cancel") if f'value="{a}"' in fleet}
    expected = ({"approve", "retry", "cancel"} if OPERATES[who] else set()) | (
        {"release"} if RELEASES[who] else set()
    )
    assert offered == expected
    run = runs["team-a"]
    page = person(who).get(reverse("admin:workflows_run_change", args=[run.pk])).content.decode()
    approve = reverse("admin:workflows_run_step_action", args=[run.pk, "approve", "approve"])
    release = reverse("admin:workflows_run_action", args=[run.pk, "release"])
    assert (approve in page) == ("team-a" in OPERATES[who])
    assert (release in page) == ("team-a" in RELEASES[who])


def test_the_run_history_shows_the_providers_subject_and_email(
    person: PersonClient, runs: dict[str, Run]
) -> None:
    run = runs["team-a"]
    url = reverse("admin:workflows_run_step_action", args=[run.pk, "approve", "approve"])
    person("ann").post(url, {"reason": "window open"})
    page = person("vic").get(reverse("admin:workflows_run_change", args=[run.pk]))
    history = page.content.decode()
    history = history[history.index('id="history"') :]
    assert "admin:ann@example.com" in history
    assert "ann@example.com (subject sub-ann)" in history


@pytest.mark.parametrize("who", PEOPLE)
def test_templates_are_read_by_viewers_and_changed_by_editors_only(
    person: PersonClient, runs: dict[str, Run], who: str
) -> None:
    template = wf.template("gate", steps=[{"name": "approve", "type": "approval"}])
    url = reverse("admin:workflows_workflowtemplate_change", args=[template.pk])
    page = person(who).get(url)
    if not SEES[who]:
        assert page.status_code == 302
        return
    assert page.status_code == 200
    editable = 'name="document"' in page.content.decode()
    assert editable == (who == "pat")
    add = person(who).get(reverse("admin:workflows_workflowtemplate_add"))
    assert add.status_code == (200 if who == "pat" else 403)
    delete = person(who).post(
        reverse("admin:workflows_workflowtemplate_delete", args=[template.pk]), {"post": "yes"}
    )
    assert WorkflowTemplate.objects.filter(pk=template.pk).exists() == (who != "pat")
    assert delete.status_code in (302, 403)


def _cli(*args: str) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("who", PEOPLE)
def test_the_cli_as_a_person_answers_and_acts_under_their_roles(
    person: PersonClient, runs: dict[str, Run], who: str
) -> None:
    person(who)  # signed in once: the CLI knows them by their e-mail, with those groups
    user = f"{who}@example.com"
    listed = _cli("list", "--as", user)
    assert shown(listed, runs) == SEES[who]
    for ns, run in runs.items():
        try:
            _cli("approve", str(run.pk), "--step", "approve", "--reason", "r", "--as", user)
        except CommandError as exc:
            assert ns not in OPERATES[who]
            expected = "does not exist" if ns not in SEES[who] else "may not approve runs"
            assert expected in str(exc)
    assert approved(runs) == OPERATES[who]
    try:
        _cli("bypass", "--hook", "BeforeClusterUpgrade", "--namespace", "team-b",
             "--for", "1h", "--reason", "INC-1", "--as", user)  # fmt: skip
    except CommandError as exc:
        assert "may not open bypasses in namespace team-b" in str(exc)
    opened = Bypass.objects.filter(namespace="team-b").first()
    assert (opened is not None) == ("team-b" in RELEASES[who])
    if opened is not None:
        assert (opened.actor, opened.actor_subject, opened.actor_email) == (
            f"cli:{user}",
            f"sub-{who}",
            user,
        )


def test_the_cli_as_nobody_known_says_so(runs: dict[str, Run]) -> None:
    with pytest.raises(CommandError, match=r"no user 'zed@example\.com'"):
        _cli("list", "--as", "zed@example.com")
    with pytest.raises(CommandError, match=r"give no --actor with it"):
        _cli("release", "1", "--reason", "r", "--as", "x", "--actor", "y")
