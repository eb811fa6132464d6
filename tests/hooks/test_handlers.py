"""HOOKSVC_HANDLERS: the discovery entries are configurable and checked as CAPI checks them."""

from __future__ import annotations

import json

import pytest

from hooksvc import handlers


def test_defaults_are_kebab_case_names_ten_seconds_and_fail() -> None:
    built = {h.hook.name: h for h in handlers.build("")}
    assert len(built) == 9
    upgrade = built["BeforeClusterUpgrade"]
    assert (upgrade.name, upgrade.timeout_seconds, upgrade.failure_policy) == (
        "before-cluster-upgrade",
        10,
        "Fail",
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ("{", "HOOKSVC_HANDLERS is not valid JSON"),
        ("[]", "HOOKSVC_HANDLERS must be a JSON object keyed by hook name"),
        ({"BeforeNothing": {}}, "unknown hook 'BeforeNothing'"),
        ({"BeforeClusterCreate": []}, "HOOKSVC_HANDLERS.BeforeClusterCreate must be an object"),
        ({"BeforeClusterCreate": {"nmae": "x"}}, "unknown field 'nmae'"),
        ({"BeforeClusterCreate": {"name": "Backup_1"}}, ".name must be a DNS-1123 label"),
        ({"BeforeClusterCreate": {"name": "a" * 64}}, ".name must be a DNS-1123 label"),
        (
            {"BeforeClusterCreate": {"timeoutSeconds": -1}},
            "timeoutSeconds must be an integer from 0 to 30",
        ),
        (
            {"BeforeClusterCreate": {"timeoutSeconds": "5"}},
            "timeoutSeconds must be an integer from 0 to 30",
        ),
        (
            {"BeforeClusterCreate": {"failurePolicy": "ignore"}},
            "failurePolicy must be Fail or Ignore",
        ),
        (
            {"BeforeClusterCreate": {"name": "x"}, "BeforeClusterDelete": {"name": "x"}},
            "handler name 'x' is used twice",
        ),
    ],
)
def test_invalid_overrides_are_refused_with_the_field_named(
    overrides: object, message: str
) -> None:
    raw = overrides if isinstance(overrides, str) else json.dumps(overrides)
    with pytest.raises(
        handlers.ConfigurationError, match=message.replace(".", r"\.").replace("[", r"\[")
    ):
        handlers.build(raw)


def test_zero_and_thirty_seconds_are_both_allowed() -> None:
    built = handlers.build(
        json.dumps(
            {
                "BeforeClusterCreate": {"timeoutSeconds": 0},
                "BeforeClusterDelete": {"timeoutSeconds": 30},
            }
        )
    )
    assert {h.hook.name: h.timeout_seconds for h in built}["BeforeClusterDelete"] == 30
