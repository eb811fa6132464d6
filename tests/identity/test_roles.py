"""The role rules (HOOKSVC_ROLES_FILE) and the grants they give: what parses, what is refused
with which message, and how several rules add up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workflows.operators import access, roles
from workflows.operators.access import Permission as P

ROOT = Path(__file__).resolve().parents[2]


def test_a_rule_gives_its_roles_in_its_namespaces_and_rules_add_up() -> None:
    rules = roles.parse(
        """
        rules:
          - group: app-a
            roles: [operator]
            namespaces: [team-a]
          - group: app-b
            roles: [viewer, releaser]
            namespaces: [team-b]
          - group: auditors
            roles: [viewer]
        """
    )
    a, b = frozenset({"team-a"}), frozenset({"team-b"})
    assert roles.grants_of(["app-a"], rules) == {P.VIEW: a, P.OPERATE: a}
    assert roles.grants_of(["app-a", "app-b"], rules) == {
        P.VIEW: a | b,
        P.OPERATE: a,
        P.RELEASE: b,
    }
    # Viewing everywhere absorbs viewing some namespaces.
    assert roles.grants_of(["app-a", "auditors"], rules)[P.VIEW] is None
    assert roles.grants_of(["someone-else"], rules) == {}
    assert roles.grants_of([], ()) == {}


def test_admin_is_every_permission_everywhere() -> None:
    rules = roles.parse("rules: [{group: ops, roles: [admin]}]")
    assert roles.grants_of(["ops"], rules) == access.EVERYTHING


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("- group: a", "write a mapping with one key, `rules`"),
        ("rules: {group: a}", "`rules` must be a list"),
        ("rules: [a]", "rules[0]: a rule is a mapping"),
        ("rules: [{group: a, roles: [viewer], who: b}]", "rules[0]: unknown field(s) who"),
        ("rules: [{roles: [viewer]}]", "rules[0].group: the group's name"),
        ("rules: [{group: a}]", "rules[0].roles: a list of roles, from viewer, operator"),
        ("rules: [{group: a, roles: [root]}]", "rules[0].roles: unknown role 'root'"),
        (
            "rules: [{group: a, roles: [viewer], namespaces: []}]",
            "rules[0].namespaces: a list of namespaces; leave it out for every namespace",
        ),
        (
            "rules: [{group: a, roles: [viewer], namespaces: [Team_A]}]",
            "rules[0].namespaces: 'Team_A' is not a Kubernetes namespace name",
        ),
        (
            "rules: [{group: a, roles: [viewer]}, {group: b, roles: [editor], namespaces: [x]}]",
            "rules[1]: editor cannot be limited to namespaces",
        ),
        ("rules: [{group: a, roles: [admin], namespaces: [x]}]", "admin cannot be limited"),
        ("rules: [", "not YAML"),
    ],
)
def test_a_malformed_rule_is_refused_with_where_and_why(document: str, message: str) -> None:
    with pytest.raises(roles.RulesError) as refused:
        roles.parse(document)
    assert message in str(refused.value)


def test_an_empty_file_has_no_rules() -> None:
    assert roles.parse("") == ()
    assert roles.parse("rules: []") == ()


def test_a_process_with_a_malformed_rules_file_does_not_start(tmp_path: Path) -> None:
    rules = tmp_path / "roles.yaml"
    rules.write_text("rules: [{group: a, roles: [superuser]}]")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    env["HOOKSVC_ROLES_FILE"] = str(rules)
    checked = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode != 0
    assert f"HOOKSVC_ROLES_FILE {rules}: rules[0].roles: unknown role 'superuser'" in (
        checked.stderr
    )
    env["HOOKSVC_ROLES_FILE"] = str(tmp_path / "missing.yaml")
    missing = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode != 0 and "cannot read it" in missing.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HOOKSVC_OIDC_ISSUER": "http://dex.example"}, "must be an https:// URL"),
        ({"HOOKSVC_OIDC_ISSUER": "https://dex.example"}, "HOOKSVC_OIDC_CLIENT_ID must be set"),
        (
            {
                "HOOKSVC_OIDC_ISSUER": "https://dex.example",
                "HOOKSVC_OIDC_CLIENT_ID": "hooksvc",
                "HOOKSVC_OIDC_SCOPES": "email groups",
            },
            "HOOKSVC_OIDC_SCOPES must include openid",
        ),
        ({"HOOKSVC_LOCAL_LOGIN": "0"}, "HOOKSVC_LOCAL_LOGIN=0 needs HOOKSVC_OIDC_ISSUER"),
        ({"HOOKSVC_LOCAL_LOGIN": "off"}, "HOOKSVC_LOCAL_LOGIN must be 1 or 0, got 'off'"),
    ],
)
def test_sign_in_settings_that_cannot_work_stop_the_process(
    env: dict[str, str], message: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSVC_OIDC_")}
    started = subprocess.run(
        [sys.executable, "-c", "import hooksvc.settings"],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert started.returncode == 1
    assert message in started.stderr


def test_an_actor_answers_may_where_and_require() -> None:
    ann = access.Actor(
        name="admin:ann",
        grants={P.VIEW: frozenset({"team-a", "team-b"}), P.OPERATE: frozenset({"team-a"})},
    )
    assert ann.may(P.VIEW) and ann.may(P.OPERATE, "team-a")
    assert not ann.may(P.OPERATE, "team-b") and not ann.may(P.RELEASE)
    assert not ann.may_everywhere(P.VIEW)
    assert str(ann.where(P.OPERATE)) == "(AND: ('cluster_namespace__in', ['team-a']))"
    assert str(ann.where(P.RELEASE, "namespace")) == "(AND: ('namespace__in', []))"
    ann.require(P.OPERATE, "team-a", "approve runs")
    with pytest.raises(access.Denied, match="admin:ann may not approve runs in namespace team-b"):
        ann.require(P.OPERATE, "team-b", "approve runs")
    with pytest.raises(access.Denied, match="may not open bypasses in every namespace"):
        ann.require(P.RELEASE, "", "open bypasses")
    root = access.unrestricted("cli:root")
    assert root.may_everywhere(P.EDIT) and str(root.where()) == "(AND: )"
