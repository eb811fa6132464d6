"""The optional hooks in the contract: CanUpdateMachine, CanUpdateMachineSet, UpdateMachine
(family InPlaceUpdates) and GenerateUpgradePlan (UpgradePlan), served only when
HOOKSVC_OPTIONAL_HOOKS names their family.

Covers: discovery and routes with and without the setting, the settings' errors, request
validation with the field named, the response shapes (retryAfterSeconds on UpdateMachine
only: CAPI's UpdateMachineResponse embeds CommonRetryResponse, the others CommonResponse,
api/runtime/hooks/v1alpha1/inplaceupdate_types.go and upgrade_plan_types.go), the OpenAPI
document, the hook-call record and the metrics.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from typing import Any

import jsonschema
import pytest
from django.test import Client, override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hooksvc import metrics
from hooksvc.contract import catalog, handlers, openapi
from tests.support import capi
from tests.support import capi_machines as cm
from workflows.hookpath import hookcalls
from workflows.models import HookCall

BOTH = "InPlaceUpdates,UpgradePlan"
OPTIONAL = list(catalog.OPTIONAL_HOOKS)


def _requests() -> dict[str, dict[str, Any]]:
    return {
        "CanUpdateMachine": cm.can_update_machine(cm.objects(), cm.objects()),
        "CanUpdateMachineSet": cm.can_update_machine_set(cm.set_objects(), cm.set_objects()),
        "UpdateMachine": cm.update_machine(cm.objects()),
        "GenerateUpgradePlan": cm.generate_upgrade_plan("v1.30.2", "v1.33.0", "v1.30.2"),
    }


def _post(client: Client, hook: str, body: object) -> dict[str, Any]:
    response = client.post(capi.hook_path(hook), json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    answer: dict[str, Any] = response.json()
    return answer


def test_by_default_only_the_lifecycle_hooks_are_served() -> None:
    assert [h.hook.name for h in handlers.build("")] == list(catalog.HOOKS)


@pytest.mark.parametrize(
    ("families", "served"),
    [
        ("InPlaceUpdates", ["CanUpdateMachine", "CanUpdateMachineSet", "UpdateMachine"]),
        ("UpgradePlan", ["GenerateUpgradePlan"]),
        (" UpgradePlan , InPlaceUpdates ", OPTIONAL),
    ],
)
def test_a_family_named_in_the_setting_is_served(families: str, served: list[str]) -> None:
    built = [h.hook.name for h in handlers.build("", families)]
    assert built == [*catalog.HOOKS, *served]


@pytest.mark.parametrize(
    ("overrides", "families", "message"),
    [
        ("", "InPlaceUpdate", "HOOKSVC_OPTIONAL_HOOKS: unknown family 'InPlaceUpdate'; one of:"),
        (
            {"UpdateMachine": {"timeoutSeconds": 5}},
            "UpgradePlan",
            "HOOKSVC_HANDLERS: hook 'UpdateMachine' is not served; add InPlaceUpdates to"
            " HOOKSVC_OPTIONAL_HOOKS",
        ),
    ],
)
def test_settings_that_cannot_work_are_refused(
    overrides: object, families: str, message: str
) -> None:
    raw = overrides if isinstance(overrides, str) else json.dumps(overrides)
    with pytest.raises(handlers.ConfigurationError, match=re.escape(message)):
        handlers.build(raw, families)


def test_discovery_lists_the_optional_hooks_only_when_turned_on(client: Client) -> None:
    body = json.dumps({"apiVersion": capi.API_VERSION, "kind": "DiscoveryRequest"})
    listed = client.post(capi.DISCOVERY_PATH, body, content_type="application/json").json()
    assert not {h["requestHook"]["hook"] for h in listed["handlers"]} & set(OPTIONAL)
    with override_settings(OPTIONAL_HOOKS=BOTH):
        listed = client.post(capi.DISCOVERY_PATH, body, content_type="application/json").json()
    entries = {h["requestHook"]["hook"]: h for h in listed["handlers"]}
    assert entries["UpdateMachine"] == {
        "name": "update-machine",
        "requestHook": {"apiVersion": capi.API_VERSION, "hook": "UpdateMachine"},
        "timeoutSeconds": 10,
        "failurePolicy": "Fail",
    }
    assert set(OPTIONAL) <= set(entries)


@pytest.mark.django_db
def test_an_unserved_optional_hook_is_not_found(client: Client) -> None:
    response = client.post(
        capi.hook_path("UpdateMachine"),
        json.dumps(_requests()["UpdateMachine"]),
        content_type="application/json",
    )
    assert response.status_code == 404


@pytest.mark.django_db
@override_settings(OPTIONAL_HOOKS=BOTH, HOOK_CALL_FLUSH_SECONDS=0)
@pytest.mark.parametrize("hook", OPTIONAL)
def test_each_answer_has_its_hooks_shape(client: Client, hook: str) -> None:
    answer = _post(client, hook, _requests()[hook])
    assert answer["kind"] == f"{hook}Response"
    assert answer["status"] in ("Success", "Failure")
    assert ("retryAfterSeconds" in answer) is (hook == "UpdateMachine")
    doc = openapi.document()
    for name, value in ((f"{hook}Request", _requests()[hook]), (f"{hook}Response", answer)):
        jsonschema.Draft4Validator({**doc, "$ref": f"#/components/schemas/{name}"}).validate(value)


def _without(body: dict[str, Any], *path: str) -> dict[str, Any]:
    node = body
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return body


@pytest.mark.django_db
@override_settings(OPTIONAL_HOOKS=BOTH, HOOK_CALL_FLUSH_SECONDS=0)
@pytest.mark.parametrize(
    ("hook", "body", "message"),
    [
        (
            "CanUpdateMachine",
            _without(_requests()["CanUpdateMachine"], "desired"),
            "desired is required",
        ),
        (
            "CanUpdateMachine",
            _without(_requests()["CanUpdateMachine"], "current", "infrastructureMachine"),
            "current.infrastructureMachine is required",
        ),
        (
            "CanUpdateMachine",
            _without(_requests()["CanUpdateMachine"], "current", "machine", "metadata", "name"),
            "current.machine.metadata.name is required",
        ),
        (
            "CanUpdateMachineSet",
            cm.can_update_machine_set(
                cm.set_objects(), {**cm.set_objects(), "machineSet": cm.machine()}
            ),
            "desired.machineSet.kind must be 'MachineSet', got \"Machine\"",
        ),
        (
            "UpdateMachine",
            cm.update_machine(
                {**cm.objects(), "machine": {**cm.machine(), "apiVersion": "apps/v1"}}
            ),
            "desired.machine.apiVersion must be in group cluster.x-k8s.io",
        ),
        (
            "UpdateMachine",
            {**cm.update_machine(cm.objects()), "kind": "UpdateMachineReq"},
            "kind must be 'UpdateMachineRequest', got \"UpdateMachineReq\"",
        ),
        (
            "GenerateUpgradePlan",
            cm.generate_upgrade_plan("v1.30.2", "latest"),
            'toKubernetesVersion must be a version such as v1.33.0, got "latest"',
        ),
        (
            "GenerateUpgradePlan",
            _without(
                cm.generate_upgrade_plan("v1.30.2", "v1.33.0"), "fromControlPlaneKubernetesVersion"
            ),
            "fromControlPlaneKubernetesVersion is required",
        ),
    ],
)
def test_a_malformed_request_is_a_failure_naming_the_field(
    client: Client, hook: str, body: dict[str, Any], message: str
) -> None:
    answer = _post(client, hook, body)
    assert (answer["status"], answer["message"]) == ("Failure", message)


@pytest.mark.django_db
@override_settings(OPTIONAL_HOOKS=BOTH, HOOK_CALL_FLUSH_SECONDS=0)
def test_a_call_is_recorded_with_the_machines_cluster_and_counted(client: Client) -> None:
    before = metrics.HOOK_CALLS.labels(
        hook="CanUpdateMachine", handler="can-update-machine", answer="passed"
    )._value.get()
    _post(client, "CanUpdateMachine", _requests()["CanUpdateMachine"])
    hookcalls.flush()
    row = HookCall.objects.get(hook="CanUpdateMachine")
    assert (row.cluster_key, row.cluster_namespace, row.cluster_name, row.moment) == (
        "fleet/prod-eu-1",
        "fleet",
        "prod-eu-1",
        "Machine/md-0-abcde",
    )
    after = metrics.HOOK_CALLS.labels(
        hook="CanUpdateMachine", handler="can-update-machine", answer="passed"
    )._value.get()
    assert after == before + 1


@pytest.mark.django_db
@override_settings(OPTIONAL_HOOKS=BOTH, HOOK_CALL_FLUSH_SECONDS=0)
def test_an_update_machine_record_names_the_desired_spec(client: Client) -> None:
    _post(client, "UpdateMachine", cm.update_machine(cm.objects()))
    _post(client, "UpdateMachine", cm.update_machine(cm.objects(machine={"version": "v1.33.1"})))
    moments = list(HookCall.objects.filter(hook="UpdateMachine").values_list("moment", flat=True))
    assert len(set(moments)) == 2, "a new desired spec is a new moment"
    assert all(re.fullmatch(r"md-0-abcde@[0-9a-f]{16}", m) for m in moments)


def test_the_openapi_document_has_the_optional_hooks_when_served() -> None:
    with override_settings(OPTIONAL_HOOKS=BOTH):
        paths = openapi.document()["paths"]
    assert {capi.hook_path(h) for h in OPTIONAL} <= set(paths)
    assert not {capi.hook_path(h) for h in OPTIONAL} & set(openapi.document()["paths"])


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def _places(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in items:
        found += _places(child, (*path, key))
    return found


@pytest.mark.django_db
@override_settings(OPTIONAL_HOOKS=BOTH, HOOK_CALL_FLUSH_SECONDS=0)
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(hook=st.sampled_from(OPTIONAL), seed=st.integers(0, 10**6), value=_JSON)
def test_a_request_with_any_part_replaced_is_answered_never_a_crash(
    client: Client, caplog: pytest.LogCaptureFixture, hook: str, seed: int, value: Any
) -> None:
    """Any field of a valid request replaced by any JSON value: HTTP 200, Success or
    Failure, and nothing logged as an error (a crash would be hooksvc's fault)."""
    caplog.clear()
    body = copy.deepcopy(_requests()[hook])
    places = _places(body)[1:]
    place = places[seed % len(places)]
    node = body
    for key in place[:-1]:
        node = node[key]
    node[place[-1]] = value
    answer = _post(client, hook, body)
    assert answer["status"] in ("Success", "Failure"), answer
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
