"""In-place policies and the CanUpdateMachine / CanUpdateMachineSet answers.

Covers: a patch applied to current gives desired in the covered fields and changes nothing
else (a Hypothesis property over arbitrary JSON objects and covered paths); the answers
through the hook as CAPI reads them (tests/support/capi_inplace.py: KCP's
applyPatchesToRequest and matchesMachine), for Machines and MachineSets, selectors and
namespaces; the patch bytes are base64 (CAPI's Patch.patch is a Go []byte,
api/runtime/hooks/v1alpha1/inplaceupdate_types.go); no database write on the path; the
policy documents' validation errors.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import capi
from tests.support import capi_inplace as capi_model
from tests.support import capi_machines as cm
from workflows.definitions import apply, policies, spec
from workflows.hookpath import hookcalls, inplace

POLICY = """
apiVersion: hooks.hooksvc.io/v1alpha1
kind: InPlacePolicy
metadata: {name: kubelet-and-files}
spec:
  machineSelector: {matchLabels: {inplace: "true"}}
  machine: [spec.version]
  bootstrapConfig: [spec.files]
"""

_KEYS = st.sampled_from(["a", "b", "c", "spec", "x"])
_LEAVES = st.one_of(st.integers(-3, 3), st.text("ab", max_size=2), st.none(), st.booleans())
_JSON = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=3)),
    max_leaves=12,
)
_OBJECT = st.dictionaries(_KEYS, _JSON, max_size=4)
_PATHS = st.lists(st.lists(_KEYS, min_size=1, max_size=3).map(tuple), max_size=4)
_MISSING = object()


@pytest.fixture(autouse=True)
def _policies_read_afresh() -> None:
    """Each test's database is its own: the process' cache of policies must not carry over."""
    policies.forget()


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


def _coverable(current: Any, path: tuple[str, ...]) -> bool:
    """Setting `path` crosses no non-object of `current` (else it would replace a parent)."""
    node = current
    for key in path[:-1]:
        node = node.get(key, {}) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return False
    return True


def _strip(obj: Any, paths: list[tuple[str, ...]]) -> Any:
    """`obj` without the covered paths and without the objects left empty."""
    obj = copy.deepcopy(obj)
    for path in paths:
        parent = _get(obj, path[:-1])
        if isinstance(parent, dict):
            parent.pop(path[-1], None)

    def prune(value: Any) -> Any:
        if isinstance(value, dict):
            kept = {k: prune(v) for k, v in value.items()}
            return {k: v for k, v in kept.items() if v != {}}
        return value

    return prune(obj)


@settings(max_examples=300, deadline=None)
@given(current=_OBJECT, desired=_OBJECT, paths=_PATHS)
def test_a_patch_gives_desired_in_covered_fields_and_changes_nothing_else(
    current: dict[str, Any], desired: dict[str, Any], paths: list[tuple[str, ...]]
) -> None:
    operations = inplace.patch_between(current, inplace.covered_target(current, desired, paths))
    patched = jsonpatch.apply_patch(current, operations)
    covered = [p for p in paths if _coverable(current, p)]
    # A covered path inside one that cannot be set keeps current's value: skip those.
    covered = [p for p in covered if all(_coverable(current, q) for q in paths if p[: len(q)] == q)]
    for path in covered:
        assert _get(patched, path) == _get(desired, path), f"{path} is not desired's"
    assert _strip(patched, list(paths)) == _strip(current, list(paths)), "a field outside changed"
    assert current == jsonpatch.apply_patch(current, []), "current is left as it was"


@settings(max_examples=300, deadline=None)
@given(current=_OBJECT, desired=_OBJECT, paths=_PATHS)
def test_the_patch_of_the_covered_spines_is_the_patch_of_the_whole_objects(
    current: dict[str, Any], desired: dict[str, Any], paths: list[tuple[str, ...]]
) -> None:
    """The answer compares only what lies on the way to the covered fields (a cheap win on
    CanUpdateMachineSet's latency, bench/inplace.py): it must answer the same operations."""
    whole = inplace.patch_between(current, inplace.covered_target(current, desired, paths))
    assert inplace.covered_patch(current, desired, paths) == whole


def _apply_policy(text: str = POLICY) -> None:
    apply.templates_apply(documents=spec.parse(text))


def _post(client: Client, hook: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(capi.hook_path(hook), json.dumps(body), content_type="application/json")
    answer: dict[str, Any] = response.json()
    return answer


def _machines(**desired: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    labels = {"machine": {"labels": {"inplace": "true"}}}
    current = cm.objects(machine={"version": "v1.32.4", **labels["machine"]})
    wanted = cm.objects(
        machine={"version": desired.get("version", "v1.33.0"), **labels["machine"]},
        bootstrap=desired.get("bootstrap", {}),
        infra=desired.get("infra", {}),
    )
    return current, wanted


@pytest.mark.django_db
@override_settings(OPTIONAL_HOOKS="InPlaceUpdates", HOOK_CALL_FLUSH_SECONDS=0)
def test_covered_changes_are_answered_as_patches_capi_applies_in_place(client: Client) -> None:
    _apply_policy()
    current, desired = _machines(bootstrap={"files": [{"path": "/etc/motd", "content": "new"}]})
    request = cm.can_update_machine(current, desired)
    answer = _post(client, "CanUpdateMachine", request)
    assert answer["status"] == "Success"
    assert set(answer) >= {"machinePatch", "bootstrapConfigPatch"}
    assert "infrastructureMachinePatch" not in answer, "nothing of it changed"
    operations = json.loads(base64.b64decode(answer["machinePatch"]["patch"]))
    assert operations == [{"op": "replace", "path": "/spec/version", "value": "v1.33.0"}]
    assert capi_model.can_update_in_place("CanUpdateMachine", request, answer)


@pytest.mark.django_db
@override_settings(OPTIONAL_HOOKS="InPlaceUpdates", HOOK_CALL_FLUSH_SECONDS=0)
def test_a_change_no_policy_covers_leaves_capi_to_replace_the_machine(client: Client) -> None:
    _apply_policy()
    current, desired = _machines(bootstrap={"etcd_tag": "3.6.0-0"})
    request = cm.can_update_machine(current, desired)
    answer = _post(client, "CanUpdateMachine", request)
    assert "machinePatch" in answer and "bootstrapConfigPatch" not in answer
    assert not capi_model.can_update_in_place("CanUpdateMachine", request, answer)


@pytest.mark.django_db
@override_settings(OPTIONAL_HOOKS="InPlaceUpdates", HOOK_CALL_FLUSH_SECONDS=0)
def test_machines_the_selector_does_not_pick_get_no_patch(client: Client) -> None:
    _apply_policy()
    request = cm.can_update_machine(
        cm.objects(machine={"version": "v1.32.4"}), cm.objects(machine={"version": "v1.33.0"})
    )
    answer = _post(client, "CanUpdateMachine", request)
    assert answer == {
        "apiVersion": capi.API_VERSION,
        "kind": "CanUpdateMachineResponse",
        "status": "Success",
    }


@pytest.mark.django_db
@override_settings(OPTIONAL_HOOKS="InPlaceUpdates", HOOK_CALL_FLUSH_SECONDS=0)
def test_a_machine_set_is_patched_under_its_template_spec(client: Client) -> None:
    _apply_policy()
    labels = {"inplace": "true"}
    current = cm.set_objects(version="v1.32.4", labels=labels)
    desired = cm.set_objects(
        version="v1.33.0", labels=labels, files=[{"path": "/x", "content": "y"}]
    )
    request = cm.can_update_machine_set(current, desired)
    answer = _post(client, "CanUpdateMachineSet", request)
    operations = json.loads(base64.b64decode(answer["machineSetPatch"]["patch"]))
    assert operations == [
        {"op": "replace", "path": "/spec/template/spec/version", "value": "v1.33.0"}
    ]
    assert capi_model.can_update_in_place("CanUpdateMachineSet", request, answer)


@pytest.mark.django_db(transaction=True)
@override_settings(OPTIONAL_HOOKS="InPlaceUpdates", HOOK_CALL_FLUSH_SECONDS=60)
def test_answering_writes_nothing_to_the_database(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    _apply_policy()
    monkeypatch.setattr(hookcalls, "background", False)
    current, desired = _machines()
    with CaptureQueriesContext(connection) as queries:
        _post(client, "CanUpdateMachine", cm.can_update_machine(current, desired))
    statements = [q["sql"].lstrip().split()[0].upper() for q in queries.captured_queries]
    assert statements, "the policies are read"
    assert set(statements) <= {"SELECT"}, statements
    hookcalls.flush()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "machine: [version]",
            "spec.machine[0]: must be a field path under spec, such as spec.version",
        ),
        (
            "affectsAvailability: sometimes\n  machine: [spec.version]",
            "spec.affectsAvailability: must be true or false",
        ),
        (
            "machineSelector: {matchExpressions: [{key: a, operator: In}]}\n"
            "  machine: [spec.version]",
            "spec.machineSelector.matchExpressions[0].values: must not be empty for In",
        ),
        ("namespaces: [fleet]", "spec: must cover at least one field"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(body: str, message: str) -> None:
    head = "apiVersion: hooksvc/v1alpha1\nkind: InPlacePolicy\nmetadata: {name: p}\n"
    text = f"{head}spec:\n  {body}\n"
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(text)
    assert message in str(caught.value)


@pytest.mark.django_db
def test_the_admin_lists_policies_read_only(admin_client: Client) -> None:
    _apply_policy()
    page = admin_client.get("/admin/workflows/policy/").content.decode()
    assert "kubelet-and-files" in page and "InPlacePolicy" in page
    assert admin_client.get("/admin/workflows/policy/add/").status_code == 403
