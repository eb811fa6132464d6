"""HOOKSVC_HANDLERS: the discovery entries are configurable and checked as CAPI checks them."""

from __future__ import annotations

import json
import re

import pytest

from hooksvc.contract import handlers


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
            "timeoutSeconds must be an integer from 1 to 30",
        ),
        (
            {"BeforeClusterCreate": {"timeoutSeconds": 0}},
            "timeoutSeconds must be an integer from 1 to 30 (ExtensionConfig v1beta2 requires"
            " at least 1), got 0",
        ),
        (
            {"BeforeClusterCreate": {"timeoutSeconds": 31}},
            "timeoutSeconds must be an integer from 1 to 30",
        ),
        (
            {"BeforeClusterCreate": {"timeoutSeconds": "5"}},
            "timeoutSeconds must be an integer from 1 to 30 (ExtensionConfig v1beta2 requires at"
            ' least 1), got "5"',
        ),
        (
            {"BeforeClusterCreate": {"timeoutSeconds": True}},
            "timeoutSeconds must be an integer from 1 to 30",
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
    with pytest.raises(handlers.ConfigurationError, match=re.escape(message)):
        handlers.build(raw)


def test_one_and_thirty_seconds_are_both_allowed() -> None:
    """The bounds: ExtensionConfig v1beta2 declares `minimum: 1` for a handler's timeoutSeconds
    (kubernetes-sigs/cluster-api api/runtime/v1beta2/extensionconfig_types.go, and
    shared/capi/runtime.cluster.x-k8s.io_extensionconfigs.yaml), and CAPI's discovery check
    refuses more than 30 (internal/runtime/client/client.go,
    defaultAndValidateDiscoveryResponse)."""
    built = handlers.build(
        json.dumps(
            {
                "BeforeClusterCreate": {"timeoutSeconds": 1},
                "BeforeClusterDelete": {"timeoutSeconds": 30},
            }
        )
    )
    timeouts = {h.hook.name: h.timeout_seconds for h in built}
    assert (timeouts["BeforeClusterCreate"], timeouts["BeforeClusterDelete"]) == (1, 30)
