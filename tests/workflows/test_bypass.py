"""Break glass: `workflows bypass` answers a hook's matching calls Success, starting no run.

A Success with `retryAfterSeconds: 0` is what lets CAPI go on: cluster-api's
internal/controllers/topology/cluster/scope/hookresponsetracker.go counts a hook as
blocking only while its retryAfterSeconds is not 0 (`IsBlocking`), and only a blocking
answer's message reaches the Cluster's conditions (`AggregateMessage`). So a covered
answer carries who, why and until when for hooksvc's own records and logs; the operator
sees the bypass on the fleet and in /metrics. The clock is held (`now`), so a bypass
expires by itself when the test moves it, without sleeping.
"""

from __future__ import annotations

import datetime
import io
import json
import logging
import re
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import Client

from hooksvc.contract import catalog
from tests.support import capi
from tests.support import workflows as wf
from workflows.hookpath import answers
from workflows.models import Bypass, Run, RunEvent
from workflows.operators import bypasses

pytestmark = pytest.mark.django_db

HOOK = "BeforeClusterUpgrade"
HOUR = datetime.timedelta(hours=1)
Moment = list[datetime.datetime]


@pytest.fixture
def held(now: Moment) -> Moment:
    """The held clock, on a whole second (a bypass's expiry is kept to the second)."""
    now[0] = datetime.datetime(2026, 11, 24, 0, 0, 0, tzinfo=datetime.UTC)
    return now


def _answer(call: Any) -> answers.Answer:
    return answers.answer(call, handler_name="test")


def open_bypass(**fields: Any) -> Bypass:
    given = {"hook": HOOK, "duration": HOUR, "actor": "cli:ann", "reason": "CAB-9 outage"}
    return bypasses.bypass_open(**{**given, **fields})


def cli(*args: str) -> str:
    out = io.StringIO()
    call_command("workflows", "bypass", *args, stdout=out)
    return out.getvalue()


def covered(bypass: Bypass) -> answers.Answer:
    return answers.Answer(
        catalog.Status.SUCCESS,
        f"hooksvc bypass {bypass.pk} by cli:ann until 2026-11-24 01:00:00 UTC: "
        "CAB-9 outage; no workflow runs for this call",
    )


# --- The hook path --------------------------------------------------------------------------


def test_a_covered_call_proceeds_starts_no_run_and_says_who_why_until_when(held: Moment) -> None:
    wf.template("backup")
    bypass = open_bypass()
    first = _answer(wf.call())
    assert first == covered(bypass)
    assert first.runs == ()
    assert Run.objects.count() == 0
    held[0] += datetime.timedelta(minutes=40)  # the message does not move with the clock
    assert _answer(wf.call()) == first


def test_it_expires_by_itself_and_the_hook_holds_again(held: Moment) -> None:
    wf.template("backup")
    bypass = open_bypass(duration=datetime.timedelta(minutes=30))
    held[0] += datetime.timedelta(minutes=29, seconds=59)
    assert _answer(wf.call()).message.startswith(f"hooksvc bypass {bypass.pk} ")
    held[0] += datetime.timedelta(seconds=1)
    answer = _answer(wf.call())
    assert (answer.status, answer.message, answer.retry_after) == (
        catalog.Status.SUCCESS,
        "workflow backup is starting",
        1,
    )
    assert Run.objects.get().template_name == "backup"
    bypass.refresh_from_db()
    assert bypass.ended_at is None, "expiry writes nothing: the clock alone ends it"


def test_runs_already_there_are_left_as_they_are(held: Moment) -> None:
    wf.template("backup")
    _answer(wf.call())
    run = Run.objects.get()
    before = Run.objects.filter(pk=run.pk).values().get()
    events = RunEvent.objects.count()
    open_bypass()
    assert _answer(wf.call()).retry_after == 0
    assert Run.objects.filter(pk=run.pk).values().get() == before
    assert RunEvent.objects.count() == events
    held[0] += 2 * HOUR
    assert _answer(wf.call()).runs == (run.pk,), "expired: the run holds the hook again"


def test_an_ended_bypass_covers_nothing(held: Moment) -> None:
    wf.template("backup")
    bypass = open_bypass()
    bypasses.bypass_end(bypass_id=bypass.pk, actor="cli:bob", reason="outage over")
    assert _answer(wf.call()).retry_after == 1
    bypass.refresh_from_db()
    assert (bypass.ended_at, bypass.ended_by, bypass.end_reason) == (
        held[0],
        "cli:bob",
        "outage over",
    )


@pytest.mark.parametrize(
    ("fields", "is_covered"),
    [
        ({}, True),
        ({"selector": "env=prod"}, True),
        ({"selector": "env in (prod,staging),tier notin (db)"}, True),
        ({"selector": "env!=prod"}, False),
        ({"selector": "team"}, False),
        ({"namespace": "fleet"}, True),
        ({"namespace": "other"}, False),
        ({"namespace": "fleet", "selector": "env=staging"}, False),
        ({"hook": "BeforeClusterDelete"}, False),
    ],
)
def test_hook_namespace_and_selector_pick_the_clusters(
    held: Moment, fields: dict[str, str], is_covered: bool
) -> None:
    wf.template("backup")
    open_bypass(**fields)  # the call: namespace fleet, labels env=prod
    answer = _answer(wf.call())
    assert (answer.retry_after == 0) is is_covered
    assert Run.objects.exists() is not is_covered


def test_of_several_bypasses_the_one_lasting_longest_speaks(held: Moment) -> None:
    wf.template("backup")
    open_bypass(duration=HOUR)
    longest = open_bypass(duration=3 * HOUR, selector="env=prod", actor="cli:cat")
    open_bypass(duration=6 * HOUR, selector="env=staging")
    assert _answer(wf.call()).message == (
        f"hooksvc bypass {longest.pk} by cli:cat until 2026-11-24 03:00:00 UTC: "
        "CAB-9 outage; no workflow runs for this call"
    )


def test_a_non_blocking_hook_starts_no_run_either(held: Moment) -> None:
    hook = "AfterControlPlaneInitialized"
    wf.template("install-cni", hook=hook)
    bypass = open_bypass(hook=hook)
    assert _answer(wf.call(hook)).message.startswith(f"hooksvc bypass {bypass.pk} ")
    assert Run.objects.count() == 0


def test_a_call_matching_no_template_is_not_affected(held: Moment) -> None:
    open_bypass()
    assert _answer(wf.call()) == answers.PROCEED


def test_the_steady_poll_stays_one_query_with_a_bypass_in_force(
    held: Moment, django_assert_num_queries: Any
) -> None:
    """Invariant 1: the bypasses come with the templates and runs, not in a query of their own."""
    wf.template("backup")
    wf.template("notify")
    _answer(wf.call())
    open_bypass(selector="env=prod")
    open_bypass(namespace="other")
    with django_assert_num_queries(1):
        answer = _answer(wf.call())
    assert answer.retry_after == 0


def test_the_answer_capi_gets_over_https_carries_the_message(held: Moment, client: Client) -> None:
    wf.template("backup")
    bypass = open_bypass()
    response = client.post(
        capi.hook_path(HOOK),
        json.dumps(capi.hook_request(HOOK)),
        content_type="application/json",
    )
    assert response.json() == {
        "apiVersion": capi.API_VERSION,
        "kind": "BeforeClusterUpgradeResponse",
        "status": "Success",
        "message": covered(bypass).message,
        "retryAfterSeconds": 0,
    }


# --- Opening, listing and ending: the CLI ---------------------------------------------------


def test_the_cli_opens_lists_and_ends_a_bypass_with_who_and_why(held: Moment) -> None:
    out = cli(
        "--hook", HOOK, "--selector", "env=prod", "--for", "1h", "--reason", "CAB-9 outage",
        "--actor", "cli:ann",
    )  # fmt: skip
    bypass = Bypass.objects.get()
    assert out.splitlines() == [
        f"bypass {bypass.pk} in force until 2026-11-24 01:00:00 UTC: {HOOK} for clusters "
        "matching env=prod in every namespace answer Success without runs",
        f"end it early with `{settings.MANAGE_PY} workflows bypass --end {bypass.pk} "
        '--reason "<why>"`',
    ]
    assert (bypass.actor, bypass.reason, bypass.created_at) == ("cli:ann", "CAB-9 outage", held[0])
    assert [re.split(r"\s{2,}", line) for line in cli("--list").splitlines()] == [
        ["ID", "HOOK", "NAMESPACE", "SELECTOR", "BY", "UNTIL", "REASON"],
        [
            str(bypass.pk),
            HOOK,
            "-",
            "env=prod",
            "cli:ann",
            "2026-11-24 01:00:00 UTC",
            "CAB-9 outage",
        ],
    ]
    [listed] = json.loads(cli("--list", "-o", "json"))
    assert listed["expiresAt"] == "2026-11-24T01:00:00+00:00"
    # The hint in the output runs as printed, once "<why>" is filled in.
    assert cli("--end", str(bypass.pk), "--reason", "outage over", "--actor", "cli:bob") == (
        f"bypass {bypass.pk} ended: {HOOK} calls start runs again\n"
    )
    assert cli("--list") == "no bypass in force\n"


def test_an_expired_bypass_leaves_the_list_by_itself(held: Moment) -> None:
    cli("--hook", HOOK, "--for", "90s", "--reason", "drill")
    held[0] += datetime.timedelta(seconds=90)
    assert cli("--list") == "no bypass in force\n"
    [bypass] = Bypass.objects.all()
    with pytest.raises(CommandError, match="already expired at 2026-11-24 00:01:30 UTC"):
        cli("--end", str(bypass.pk), "--reason", "late")


def test_the_default_actor_is_the_os_user(held: Moment, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "ann")
    cli("--hook", HOOK, "--for", "1h", "--reason", "drill")
    assert Bypass.objects.get().actor == "cli:ann"


def test_opening_and_ending_are_logged_as_operator_actions(
    held: Moment, caplog: pytest.LogCaptureFixture, django_capture_on_commit_callbacks: Any
) -> None:
    with (
        caplog.at_level(logging.INFO, logger="workflows.operators.bypasses"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        cli("--hook", HOOK, "--for", "2h", "--reason", "CAB-9", "--actor", "ops:ann")
        bypass = Bypass.objects.get()
        cli("--end", str(bypass.pk), "--reason", "over", "--actor", "ops:bob")
    records = [r for r in caplog.records if getattr(r, "action", "") == "operator_action"]
    keys = ("operation", "actor", "reason", "bypass", "hook", "expires")
    assert [{k: getattr(r, k) for k in keys} for r in records] == [
        {
            "operation": operation,
            "actor": actor,
            "reason": reason,
            "bypass": bypass.pk,
            "hook": HOOK,
            "expires": "2026-11-24T02:00:00+00:00",
        }
        for operation, actor, reason in (
            ("bypass", "ops:ann", "CAB-9"),
            ("bypass_end", "ops:bob", "over"),
        )
    ]


OK = ("--hook", HOOK, "--for", "1h", "--reason", "drill")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("--hook", "BeforeClusterUpgrad", *OK[2:]), "unknown hook 'BeforeClusterUpgrad'; one of:"),
        (("--hook", "ClusterDeleted", *OK[2:]), "unknown hook 'ClusterDeleted'"),
        ((*OK, "--selector", "env in prod"), "selector 'env in prod': expected '(' after in"),
        ((*OK, "--selector", "env=prod,"), "a ',' must be followed by a requirement"),
        ((*OK, "--namespace", "Team_A"), "namespace 'Team_A' is not a Kubernetes namespace name"),
        ((*OK[:2], "--for", "0s", *OK[4:]), "duration '0s': a bypass must last more than 0 s"),
        ((*OK[:2], "--for=-5m", *OK[4:]), "duration '-5m': write it as a number with a unit"),
        ((*OK[:2], "--for", "8d", *OK[4:]), "duration '8d': a bypass lasts at most 7d"),
        ((*OK[:2], "--for", "169h", *OK[4:]), "a bypass lasts at most 7d"),
        ((*OK[:2], "--for", "1 hour", *OK[4:]), "write it as a number with a unit, d, h, m or s"),
        ((*OK[:4], "--reason", "   "), "a bypass needs a reason"),
        ((*OK[:4], "--reason", "x" * 201), "reason: at most 200 characters"),
        ((*OK[:4], "--reason", "two\nlines"), "reason: one line, without control characters"),
        ((*OK[:4], "--reason", "<why>"), "the reason '<why>' is a hint's placeholder"),
        (("--end", "1", "--reason", "<why>"), "the reason '<why>' is a hint's placeholder"),
        ((*OK, "--actor", " "), "a bypass needs the operator's name"),
        (OK[:4], "a bypass needs --reason (or use --list, or --end ID to end one)"),
        ((), "a bypass needs --hook, --for, --reason"),
        (("--list", "--hook", HOOK), "--list takes no --hook"),
        (("--end", "1", "--for", "1h", "--reason", "x"), "--end takes no --for"),
        (("--end", "1"), "ending a bypass needs --reason"),
        (("--end", "99", "--reason", "x"), "bypass 99 does not exist"),
    ],
)
def test_bad_input_is_refused_clearly_and_writes_nothing(
    held: Moment, caplog: pytest.LogCaptureFixture, args: tuple[str, ...], error: str
) -> None:
    with caplog.at_level(logging.INFO), pytest.raises(CommandError) as raised:
        cli(*args)
    assert error in str(raised.value)
    assert Bypass.objects.count() == 0
    assert not [r for r in caplog.records if getattr(r, "action", "") == "operator_action"]


def test_a_bypass_is_ended_once(held: Moment) -> None:
    bypass = open_bypass()
    bypasses.bypass_end(bypass_id=bypass.pk, actor="cli:bob", reason="over")
    with pytest.raises(
        bypasses.BypassError, match=f"bypass {bypass.pk} was already ended by cli:bob"
    ):
        bypasses.bypass_end(bypass_id=bypass.pk, actor="cli:cat", reason="again")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("1d", 86400), ("7d", 604800)],
)
def test_durations_read_as_written(text: str, seconds: int) -> None:
    assert bypasses.parse_duration(text) == datetime.timedelta(seconds=seconds)


# --- Where operators see it: the fleet and /metrics -----------------------------------------


def test_the_fleet_shows_each_bypass_in_force_in_its_banner(admin_client: Client) -> None:
    assert 'id="bypasses"' not in admin_client.get("/admin/").content.decode()
    bypass = open_bypass(selector="env=prod", namespace="fleet")
    ended = open_bypass(hook="BeforeClusterDelete")
    bypasses.bypass_end(bypass_id=ended.pk, actor="cli:bob", reason="over")
    page = admin_client.get("/admin/").content.decode()
    banner = page[page.index('id="bypasses"') : page.index('id="fleet-counts"')]
    assert f"bypass {bypass.pk}: {HOOK} for clusters matching env=prod in namespace fleet" in banner
    assert "by cli:ann until" in banner and "CAB-9 outage" in banner
    assert f'bypass --end {bypass.pk} --reason "&lt;why&gt;"' in banner
    assert "BeforeClusterDelete" not in banner


def test_metrics_count_the_bypasses_in_force_by_hook(held: Moment, client: Client) -> None:
    def active() -> dict[str, str]:
        lines = client.get("/metrics").content.decode().splitlines()
        prefix = "hooksvc_bypasses_active{hook="
        return {
            line[len(prefix) :].split("}")[0].strip('"'): line.rsplit(" ", 1)[1]
            for line in lines
            if line.startswith(prefix)
        }

    open_bypass(duration=HOUR)
    open_bypass(duration=2 * HOUR, selector="env=prod")
    open_bypass(hook="BeforeClusterDelete", duration=HOUR)
    counts = active()
    assert set(counts) == set(catalog.BYPASSABLE), "every hook has a series, zeros included"
    assert (counts[HOOK], counts["BeforeClusterDelete"], counts["BeforeClusterCreate"]) == (
        "2.0",
        "1.0",
        "0.0",
    )
    held[0] += HOUR
    assert (active()[HOOK], active()["BeforeClusterDelete"]) == ("1.0", "0.0")


def test_the_admin_lists_every_bypass_with_its_state_read_only(admin_client: Client) -> None:
    in_force = open_bypass(selector="env=prod")
    ended = open_bypass(hook="BeforeClusterDelete")
    bypasses.bypass_end(bypass_id=ended.pk, actor="cli:bob", reason="over")
    expired = open_bypass()
    Bypass.objects.filter(pk=expired.pk).update(expires_at=expired.created_at - HOUR)
    page = admin_client.get("/admin/workflows/bypass/").content.decode()
    rows = page.split("<tbody>")[1].split("</tbody>")[0].split("</tr>")

    def row(bypass: Bypass) -> str:
        [found] = [r for r in rows if f"/admin/workflows/bypass/{bypass.pk}/change/" in r]
        return found

    assert ">in force</span>" in row(in_force) and "env=prod" in row(in_force)
    assert ">ended</span>" in row(ended) and "by cli:bob" in row(ended)
    assert ">expired</span>" in row(expired) and "by cli:" not in row(expired)
    assert "Add bypass" not in page
    assert "<title>Bypasses | hooksvc</title>" in page
    assert "&rsaquo; Bypasses</div>" in page and "Bypasss" not in page  # the breadcrumbs
    assert 'href="/admin/workflows/bypass/"' in admin_client.get("/admin/").content.decode()
