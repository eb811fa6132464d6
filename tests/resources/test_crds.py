"""The CustomResourceDefinitions: generated from hooksvc's definitions, structural, and
refusing what hooksvc refuses for its types.

Covers: k8s/base/crds holds what `manage.py crds` generates (a stale file fails, naming
`make crds`); each CRD is a valid apiextensions.k8s.io/v1 object (kubernetes-validate's
schemas) with a structural schema and valid printer columns (apiextensions-apiserver's
rules, tests/resources/schemas.py); examples/ validate against the schemas and apply with
apply_workflows; a wrongly typed field is refused by the schema and by apply_workflows
alike; whatever hooksvc stores (every built-in step type with its defaults filled in) the
schema accepts; a custom step module appears in a regenerated CRD.
"""

from __future__ import annotations

import copy
import io
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from django.core.management import CommandError, call_command
from django.test import override_settings

from tests.resources import schemas
from tests.workflows import documents
from workflows.definitions import crds, spec
from workflows.definitions import schemas as spec_schemas
from workflows.steps import registry

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / crds.DIRECTORY
CUSTOM = "tests.workflows.custom_steps"
#: A valid `with` for each built-in step type (a new type needs a row: the CRD lists it).
MINIMAL_WITH: dict[str, dict[str, Any]] = {
    "noop": {},
    "wait": {"seconds": 1},
    "http": {"url": "https://hooks.example.com/x"},
    "approval": {"message": "go?"},
    "backup_pvs": {"backend": "velero"},
    "conformance": {},
    "addon_install": {
        "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}]
    },
    "addon_remove": {"inventory": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}]},
    "k8s_job": {"image": "busybox", "command": ["true"], "env": {"A": "b"}},
    "node_drain": {"node": "worker-1"},
    "node_uncordon": {},
    "node_wait": {"version": "v1.33.0"},
    "node_job": {"image": "busybox", "node": "worker-1"},
    "gate": {"matchLabels": {"ring": "canary"}, "count": 2},
    "window": {"timeZone": "UTC", "weekly": [{"days": ["Sun"], "start": "00:00", "end": "06:00"}]},
}


def schema_of(kind: str, modules: tuple[str, ...] = ()) -> dict[str, Any]:
    crd = crds.definition(kind, crds.step_types(modules))
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def resource(kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": spec.RESOURCE_API_VERSION,
        "kind": kind,
        "metadata": {"name": name},
        "spec": body,
    }


def test_the_committed_crds_are_the_generated_ones() -> None:
    generated = crds.files()
    assert sorted(generated) == sorted(
        p.name for p in COMMITTED.glob("*.yaml") if p.stem != "kustomization"
    )
    for name, text in generated.items():
        assert (COMMITTED / name).read_text() == text, f"{name} is stale: run `make crds`"
    with override_settings(STEP_MODULES=[]):
        call_command("crds", "--check", str(COMMITTED))


def test_the_check_names_a_stale_crd_and_how_to_regenerate_it(tmp_path: Path) -> None:
    with override_settings(STEP_MODULES=[]):
        call_command("crds", "--write", str(tmp_path), stdout=io.StringIO())
        stale = tmp_path / "hooks.hooksvc.io_addonprofiles.yaml"
        stale.write_text(stale.read_text().replace("maxLength: 40", "maxLength: 41"))
        with pytest.raises(CommandError) as caught:
            call_command("crds", "--check", str(tmp_path))
    assert str(caught.value) == (
        f"hooks.hooksvc.io_addonprofiles.yaml in {tmp_path} differ from the generated CRDs; "
        "regenerate them (make crds)"
    )


@pytest.mark.parametrize("version", ["1.32", "1.37"])
def test_each_crd_is_a_valid_customresourcedefinition(version: str) -> None:
    files = crds.files()
    assert len(files) == len(spec.PLURALS) > 0, sorted(files)
    for text in files.values():
        crd = yaml.safe_load(text)
        kubernetes_validate.validate(crd, version, strict=True)
        (served,) = crd["spec"]["versions"]
        assert served["subresources"] == {"status": {}}
        assert schemas.column_errors(served["additionalPrinterColumns"]) == []
        assert [c["name"] for c in served["additionalPrinterColumns"]][-3:] == [
            "Accepted",
            "Age",
            "Reason",
        ]


@pytest.mark.usefixtures("custom_module")
@pytest.mark.parametrize("kind", sorted(spec.PLURALS))
def test_each_schema_is_structural(kind: str) -> None:
    assert schemas.structural_errors(schema_of(kind)) == []
    assert schemas.structural_errors(schema_of(kind, (CUSTOM,))) == []


@pytest.mark.parametrize(
    ("schema", "error"),
    [
        ({"type": "object", "properties": {"a": {}}}, "properties[a].type: Required value"),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "properties[a].items"),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "oneOf": [{"type": "object"}],
            },
            "oneOf[0].type: must be undefined",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "oneOf": [{"description": "x"}],
            },
            "oneOf[0].description: must be undefined",
        ),
        (
            {"type": "object", "oneOf": [{"properties": {"b": {"enum": [1]}}}]},
            "openAPIV3Schema.properties[b]: Required value: because a junctor defines it",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "a": {
                        "type": "object",
                        "properties": {"b": {"type": "string"}},
                        "additionalProperties": {"type": "string"},
                    }
                },
            },
            "properties[a].additionalProperties: and properties are mutual exclusive",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}
                },
            },
            "only name and generateName",
        ),
        ({"type": "object", "properties": {"a": {"type": "string", "default": "x"}}}, "default"),
        ({"type": "array", "items": {"type": "string"}}, "must be object at the root"),
    ],
)
def test_the_structural_check_finds_each_broken_rule(schema: dict[str, Any], error: str) -> None:
    assert any(error in e for e in schemas.structural_errors(schema)), schemas.structural_errors(
        schema
    )


def test_the_examples_validate_against_the_crds_and_apply_with_apply_workflows() -> None:
    checked = 0
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        text = path.read_text()
        docs = [d for d in yaml.safe_load_all(text) if d and d.get("kind") in spec.PLURALS]
        for doc in docs:
            assert doc["apiVersion"] == spec.RESOURCE_API_VERSION, f"{path}: {doc['metadata']}"
            assert schemas.object_errors(doc, schema_of(doc["kind"])) == [], path
            checked += 1
        if docs:
            assert len(spec.parse(text)) == len(docs), path
    assert checked >= 8


@pytest.mark.parametrize(
    ("changes", "crd_error", "hooksvc_error"),
    [
        (
            {"hook": "BeforeUpgrade"},
            "spec.hook: 'BeforeUpgrade' is not one of",
            "spec.hook: unknown hook",
        ),
        (
            {"retryAfterSeconds": "10"},
            "spec.retryAfterSeconds: '10' is not of type 'integer'",
            "must be an integer",
        ),
        (
            {"retryAfterSeconds": 0},
            "spec.retryAfterSeconds: 0 is less than the minimum of 1",
            "from 1 to",
        ),
        (
            {"onFailure": "Ignore"},
            "spec.onFailure: 'Ignore' is not one of",
            "must be one of Block, Fail",
        ),
        (
            {"holdsLifecycle": "no"},
            "spec.holdsLifecycle: 'no' is not of type 'boolean'",
            "must be true or false",
        ),
        (
            {"settings": {"profile": 1}},
            "spec.settings.profile: 1 is not of type 'string'",
            "must be a string",
        ),
        (
            {"clusterSelector": {"namespaces": []}},
            "spec.clusterSelector.namespaces: [] should be non-empty",
            "at least one",
        ),
        (
            {"waitFor": ["Not_A_Label"]},
            "spec.waitFor.0: 'Not_A_Label' does not match",
            "DNS-1123 label",
        ),
        ({"steps": []}, "spec.steps: [] should be non-empty", "must be a list of 1 to 200 steps"),
        (
            {"steps": [{"name": "s", "type": "wait", "with": {"seconds": "5"}}]},
            "spec.steps.0.with.seconds: '5' is not of type 'number'",
            "spec.steps[0].with.seconds: must be a number",
        ),
        (
            {"steps": [{"name": "s", "type": "wait", "with": {"seconds": -1}}]},
            "spec.steps.0.with.seconds: -1 is less than the minimum of 0",
            "spec.steps[0].with.seconds: must be at least 0",
        ),
        (
            {"steps": [{"name": "s", "type": "wait"}]},
            "spec.steps.0: ",
            "spec.steps[0].with.seconds: is required",
        ),
        (
            {"steps": [{"name": "s", "type": "wait", "with": {"seconds": 1, "url": "https://x"}}]},
            "spec.steps.0: ",
            "spec.steps[0].with.url: unknown parameter",
        ),
        (
            {
                "steps": [
                    {"name": "s", "type": "k8s_job", "with": {"image": "x", "cluster": "mine"}}
                ]
            },
            "spec.steps.0.with.cluster: 'mine' is not one of",
            "spec.steps[0].with.cluster: must be one of management, workload",
        ),
        (
            {
                "steps": [
                    {"name": "s", "type": "http", "with": {"url": "https://x", "pollSeconds": 5}}
                ]
            },
            "spec.steps.0: ",
            "spec.steps[0].with.pollSeconds: unknown parameter",
        ),
        (
            {"steps": [{"name": "s", "type": "k8s_job", "with": {"image": "x", "command": [1]}}]},
            "spec.steps.0.with.command.0: 1 is not of type 'string'",
            "spec.steps[0].with.command: item 0 must be a non-empty string",
        ),
        (
            {
                "steps": [
                    {"name": "s", "type": "addon_install", "with": {"charts": [{"chart": "x"}]}}
                ]
            },
            "spec.steps.0.with.charts.0: 'release' is a required property",
            "spec.steps[0].with.charts: item 0 needs release and chart",
        ),
        (
            {"steps": [{"name": "s", "type": "teleport"}]},
            "spec.steps.0.type: 'teleport' is not one of",
            "spec.steps[0].type: unknown step type 'teleport'",
        ),
        (
            {"steps": [{"name": "s", "type": "noop", "retries": 101}]},
            "spec.steps.0.retries: 101 is greater than the maximum of 100",
            "must be an integer from 0 to 100",
        ),
    ],
)
def test_a_wrongly_typed_field_is_refused_by_the_crd_and_by_apply_workflows(
    changes: dict[str, Any], crd_error: str, hooksvc_error: str
) -> None:
    doc = documents.template("x", **changes)
    doc["apiVersion"] = spec.RESOURCE_API_VERSION
    errors = schemas.object_errors(doc, schema_of("WorkflowTemplate"))
    assert any(e.startswith(crd_error) for e in errors), errors
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(documents.dump(doc))
    assert hooksvc_error in str(caught.value)


def test_a_bad_profile_is_refused_by_the_crd_and_by_apply_workflows() -> None:
    body = {"addons": {"manifests": "all of them"}, "clusterDeletionBehavior": "Keep"}
    errors = schemas.object_errors(
        resource("AddonProfile", "edge", body), schema_of("AddonProfile")
    )
    assert [e.split(":")[0] for e in errors] == [
        "spec.addons.manifests",
        "spec.clusterDeletionBehavior",
    ]
    long_name = resource("AddonProfile", "a" * 41, {"addons": MINIMAL_WITH["addon_install"]})
    assert schemas.object_errors(long_name, schema_of("AddonProfile")) == [
        f"metadata.name: '{'a' * 41}' is too long"
    ]


def test_whatever_hooksvc_stores_the_crd_accepts() -> None:
    """Every built-in step type, with its defaults filled in, as runs and the admin show it."""
    assert set(MINIMAL_WITH) == set(crds.step_types())
    steps = [
        {"name": name.replace("_", "-"), "type": name, "with": w}
        for name, w in MINIMAL_WITH.items()
    ]
    for hook in spec.TEMPLATE_HOOKS:
        # A gate holds BeforeClusterUpgrade only (its check refuses other hooks).
        here = [s for s in steps if s["type"] != "gate" or hook == "BeforeClusterUpgrade"]
        normalized = spec.workflow_template(
            {"hook": hook, "steps": copy.deepcopy(here)}, "all-types"
        )
        assert (
            schemas.object_errors(
                resource("WorkflowTemplate", "all-types", normalized), schema_of("WorkflowTemplate")
            )
            == []
        )
    profile = spec.addon_profile(
        {"addons": MINIMAL_WITH["addon_install"], "dependsOn": ["base"]}, "edge"
    )
    assert (
        schemas.object_errors(resource("AddonProfile", "edge", profile), schema_of("AddonProfile"))
        == []
    )


@pytest.fixture
def custom_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The custom module not imported yet, as in a process that generates the CRDs."""
    registry.load_builtins()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry._REGISTRY.pop("chat_notify", None)
    monkeypatch.delitem(sys.modules, CUSTOM, raising=False)


@pytest.mark.usefixtures("custom_module")
def test_a_custom_step_module_is_in_a_regenerated_crd() -> None:
    step = {"name": "tell", "type": "chat_notify", "with": {"channel": "#ops"}}
    doc = resource("WorkflowTemplate", "x", {"hook": "BeforeClusterDelete", "steps": [step]})
    assert schemas.object_errors(doc, schema_of("WorkflowTemplate", (CUSTOM,))) == []
    # Without the module, the CRD does not know the type.
    assert any(
        "'chat_notify' is not one of" in e
        for e in schemas.object_errors(doc, schema_of("WorkflowTemplate"))
    )
    step["with"] = {"channel": 7}
    assert "spec.steps.0.with.channel: 7 is not of type 'string'" in schemas.object_errors(
        doc, schema_of("WorkflowTemplate", (CUSTOM,))
    )
    out = io.StringIO()
    with override_settings(STEP_MODULES=[CUSTOM]):
        call_command("crds", stdout=out)
    printed = list(yaml.safe_load_all(out.getvalue()))
    assert [d["metadata"]["name"] for d in printed] == [
        "workflowtemplates.hooks.hooksvc.io",
        "addonprofiles.hooks.hooksvc.io",
        "inplacepolicies.hooks.hooksvc.io",
        "upgradepolicies.hooks.hooksvc.io",
    ]
    assert "chat_notify" in str(printed[0])


def test_a_declared_shape_is_checked_by_hooksvc_and_published_in_the_schema() -> None:
    """Param.items/fields/values: what the CRD says of a nested value, hooksvc checks too."""
    shaped = {
        "tags": registry.Param(list, items=registry.Param(str)),
        "target": registry.Param(
            dict,
            fields={
                "host": registry.Param(str, required=True),
                "port": registry.Param(int, minimum=1),
            },
        ),
        "env": registry.Param(dict, values=registry.Param(str)),
    }
    assert registry.validate_params(
        shaped, {"tags": ["a"], "target": {"host": "h", "port": 1}, "env": {"A": "b"}}
    )
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tags": ["a", 1]}, "tags[1]: must be a string"),
        ({"target": {"port": 1}}, "target.host: is required"),
        ({"target": {"host": "h", "port": 0}}, "target.port: must be at least 1"),
        ({"target": {"host": "h", "hots": 1}}, "target.hots: unknown field"),
        ({"env": {"A": None}}, "env.A: must be a string"),
    ]
    for given, message in cases:
        with pytest.raises(registry.ParamError) as caught:
            registry.validate_params(shaped, given)
        assert str(caught.value) == message
    assert spec_schemas.param_schema(shaped["target"]) == {
        "type": "object",
        "properties": {"host": {"type": "string"}, "port": {"type": "integer", "minimum": 1}},
        "x-kubernetes-preserve-unknown-fields": True,
        "required": ["host"],
    }
    assert spec_schemas.param_schema(shaped["tags"]) == {
        "type": "array",
        "items": {"type": "string"},
    }
    assert spec_schemas.param_schema(shaped["env"]) == {
        "type": "object",
        "additionalProperties": {"type": "string"},
    }


def test_the_examples_kustomization_renders_every_example_for_gitops() -> None:
    """What Argo CD or Flux would sync from examples/ (kubectl kustomize, as they build it)."""
    exe = shutil.which("kubectl")
    if exe is None:
        pytest.skip("kubectl is not installed (docs/deploy.md)")
    proc = subprocess.run(
        [exe, "kustomize", str(ROOT / "examples")], capture_output=True, text=True, check=True
    )
    rendered = [d for d in yaml.safe_load_all(proc.stdout) if d]
    expected = [
        d
        for path in sorted((ROOT / "examples").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d and d.get("kind") in spec.PLURALS
    ]
    assert sorted(d["metadata"]["name"] for d in rendered) == sorted(
        d["metadata"]["name"] for d in expected
    )
    for doc in rendered:
        assert schemas.object_errors(doc, schema_of(doc["kind"])) == [], doc["metadata"]
