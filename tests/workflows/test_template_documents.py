"""definitions.spec: what a valid document normalizes to, and the message of every rejection.

Messages name the document (1-based, with its name when it has one) and the field path
(kubectl style, 0-based list indices), so an operator can find the typo.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.workflows import documents
from workflows.definitions import spec
from workflows.steps import registry

KNOWN_HOOKS = (
    "BeforeClusterCreate, AfterControlPlaneInitialized, BeforeClusterUpgrade, "
    "BeforeControlPlaneUpgrade, AfterControlPlaneUpgrade, BeforeWorkersUpgrade, "
    "AfterWorkersUpgrade, AfterClusterUpgrade, BeforeClusterDelete, ClusterDeleted, UpdateMachine"
)


def error_of(text: str) -> str:
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(text)
    return str(caught.value)


def test_a_valid_template_is_normalized_with_every_default() -> None:
    [doc] = spec.parse(documents.dump(documents.template()))
    assert (doc.index, doc.kind, doc.name) == (1, "WorkflowTemplate", "backup-before-upgrade")
    assert doc.spec == {
        "hook": "BeforeClusterUpgrade",
        "clusterSelector": {"namespaces": ["prod"], "matchLabels": {"env": "prod"}},
        "settings": {},
        "retryAfterSeconds": 10,
        "approvalRetryAfterSeconds": None,
        "onFailure": "Block",
        "deadlineSeconds": None,
        "onDeadline": "Block",
        "concurrency": None,
        "waitFor": [],
        "holdsLifecycle": True,
        "steps": [
            {
                "name": "snapshot",
                "type": "wait",
                "with": {"seconds": 5},
                "timeoutSeconds": None,
                "retries": 3,
                "retryForSeconds": 300,
                "dependsOn": [],
            },
            {
                "name": "approve",
                "type": "approval",
                "with": {},
                "timeoutSeconds": None,
                "retries": 3,
                "retryForSeconds": 300,
                "dependsOn": ["snapshot"],
            },
        ],
    }


def test_given_values_are_kept_and_step_parameter_defaults_filled_in() -> None:
    [doc] = spec.parse(
        documents.dump(
            documents.template(
                clusterSelector={"clusterClass": "quick-start"},
                settings={"profile": "strict"},
                retryAfterSeconds=15,
                onFailure="Fail",
                deadlineSeconds=7200,
                onDeadline="Proceed",
                concurrency=10,
                waitFor=["install-addons"],
                steps=[
                    {
                        "name": "notify",
                        "type": "http",
                        "with": {"url": "https://hooks.example.com/x"},
                        "timeoutSeconds": 60,
                        "retries": 0,
                        "retryForSeconds": 30,
                    }
                ],
            )
        )
    )
    assert doc.spec["clusterSelector"] == {"clusterClass": "quick-start"}
    assert (doc.spec["settings"], doc.spec["retryAfterSeconds"]) == ({"profile": "strict"}, 15)
    assert (doc.spec["onFailure"], doc.spec["onDeadline"]) == ("Fail", "Proceed")
    assert (doc.spec["deadlineSeconds"], doc.spec["concurrency"]) == (7200, 10)
    assert doc.spec["waitFor"] == ["install-addons"]
    assert doc.spec["steps"] == [
        {
            "name": "notify",
            "type": "http",
            "with": {
                "url": "https://hooks.example.com/x",
                "headers": {},
                "headersFromEnv": {},
                "timeoutSeconds": 10,
            },
            "timeoutSeconds": 60,
            "retries": 0,
            "retryForSeconds": 30,
            "dependsOn": [],
        }
    ]


def test_empty_documents_are_skipped_but_keep_their_position() -> None:
    text = "---\n" + documents.dump(documents.template("a"), documents.template("b")) + "---\n"
    assert [(d.index, d.name) for d in spec.parse(text)] == [(1, "a"), (2, "b")]


STEPS = documents.template()["spec"]["steps"]


@pytest.mark.parametrize(
    ("spec_changes", "message"),
    [
        (
            {"hook": "BeforeUpgrade"},
            f"spec.hook: unknown hook 'BeforeUpgrade' (known: {KNOWN_HOOKS})",
        ),
        (
            {"steps": [STEPS[0], {"name": "approve", "type": "wait", "with": {"seconds": "5"}}]},
            "spec.steps[1].with.seconds: must be a number",
        ),
        (
            {"steps": [{"name": "snapshot", "type": "no_such_step"}]},
            # The list names every registered type: the built-ins and this suite's own.
            "spec.steps[0].type: unknown step type 'no_such_step' "
            f"(known: {', '.join(registry.names())})",
        ),
        (
            {"steps": [{"name": "snapshot", "type": "wait"}]},
            "spec.steps[0].with.seconds: is required",
        ),
        (
            {"steps": [{"name": "snapshot", "type": "wait", "with": {"seconds": 1, "secs": 2}}]},
            "spec.steps[0].with.secs: unknown parameter",
        ),
        (
            {"steps": [{"name": "n", "type": "http", "with": {"url": "ftp://x"}}]},
            "spec.steps[0].with.url: must be an http or https URL",
        ),
        (
            {"steps": [{"name": "n", "type": "noop", "with": ["x"]}]},
            "spec.steps[0].with: must be an object",
        ),
        (
            {"steps": [STEPS[0], {**STEPS[1], "dependsOn": ["snapshto"]}]},
            "spec.steps[1].dependsOn: unknown step 'snapshto'",
        ),
        (
            {"steps": [{**STEPS[0], "dependsOn": ["approve"]}, STEPS[1]]},
            "spec.steps: dependsOn cycle snapshot -> approve -> snapshot",
        ),
        (
            {"steps": [{**STEPS[0], "dependsOn": ["snapshot"]}]},
            "spec.steps: dependsOn cycle snapshot -> snapshot",
        ),
        (
            {"steps": [*STEPS, {"name": "snapshot", "type": "noop"}]},
            "spec.steps[2].name: duplicate step name 'snapshot'",
        ),
        (
            {"steps": [{"name": "Snap_1", "type": "noop"}]},
            "spec.steps[0].name: must be a DNS-1123 label (at most 63 lower-case letters, "
            "digits or '-', starting and ending with a letter or digit), got 'Snap_1'",
        ),
        ({"steps": []}, "spec.steps: must be a list of 1 to 200 steps"),
        (
            {"steps": [{"name": "n", "type": "noop", "retry": 3}]},
            "spec.steps[0].retry: unknown field "
            "(known: name, type, with, timeoutSeconds, retries, retryForSeconds, dependsOn, "
            "stallSeconds)",
        ),
        (
            {"steps": [{"name": "n", "type": "noop", "retries": 101}]},
            "spec.steps[0].retries: must be an integer from 0 to 100",
        ),
        (
            {"steps": [{"name": "n", "type": "noop", "timeoutSeconds": -1}]},
            "spec.steps[0].timeoutSeconds: must be an integer from 0 to 2147483647",
        ),
        (
            {"steps": [{"name": "n", "type": "noop", "retryForSeconds": 604801}]},
            "spec.steps[0].retryForSeconds: must be an integer from 0 to 604800",
        ),
        ({"steps": [{"type": "noop"}]}, "spec.steps[0].name: is required"),
        (
            {"waitFor": ["backup-before-upgrade"]},
            "spec.waitFor: a template cannot wait for itself ('backup-before-upgrade')",
        ),
        (
            {"clusterSelecter": {}},
            "spec.clusterSelecter: unknown field (known: hook, clusterSelector, settings, "
            "retryAfterSeconds, approvalRetryAfterSeconds, onFailure, deadlineSeconds, "
            "onDeadline, concurrency, waitFor, holdsLifecycle, steps)",
        ),
        (
            {"clusterSelector": {"namespace": ["prod"]}},
            "spec.clusterSelector.namespace: unknown field "
            "(known: namespaces, matchLabels, clusterClass)",
        ),
        (
            {"clusterSelector": {"namespaces": []}},
            "spec.clusterSelector.namespaces: must list at least one namespace",
        ),
        (
            {"clusterSelector": {"matchLabels": {"tier": 1}}},
            "spec.clusterSelector.matchLabels.tier: must be a string (quote numbers)",
        ),
        ({"settings": "strict"}, "spec.settings: must be an object of strings"),
        (
            {"retryAfterSeconds": 0},
            "spec.retryAfterSeconds: must be an integer from 1 to 2147483647",
        ),
        ({"retryAfterSeconds": True}, "spec.retryAfterSeconds: must be an integer"),
        ({"concurrency": 2.5}, "spec.concurrency: must be an integer"),
        ({"onFailure": "Ignore"}, "spec.onFailure: must be one of Block, Fail, got 'Ignore'"),
        (
            {"onDeadline": "Continue"},
            "spec.onDeadline: must be one of Block, Proceed, Fail, got 'Continue'",
        ),
    ],
)
def test_a_bad_spec_is_rejected_naming_document_and_field(
    spec_changes: dict[str, Any], message: str
) -> None:
    text = documents.dump(documents.template("first"), documents.template(**spec_changes))
    assert error_of(text) == f"document 2 (backup-before-upgrade): {message}"


def test_a_cluster_deleted_template_holds_nothing_and_takes_no_settings() -> None:
    """No CAPI call comes with ClusterDeleted: the Cluster is gone, no ExtensionConfig calls."""
    [doc] = spec.parse(documents.dump(documents.template("bye", hook="ClusterDeleted")))
    assert doc.spec["holdsLifecycle"] is False
    assert error_of(
        documents.dump(documents.template("bye", hook="ClusterDeleted", holdsLifecycle=True))
    ) == (
        "document 1 (bye): spec.holdsLifecycle: a ClusterDeleted workflow holds nothing: "
        "the Cluster is gone"
    )
    assert error_of(
        documents.dump(documents.template("bye", hook="ClusterDeleted", settings={"a": "b"}))
    ) == (
        "document 1 (bye): spec.settings: no ExtensionConfig calls ClusterDeleted, so settings "
        "would never match"
    )


def test_a_missing_hook_is_rejected() -> None:
    document = documents.template()
    del document["spec"]["hook"]
    assert error_of(documents.dump(document)) == (
        "document 1 (backup-before-upgrade): spec.hook: is required"
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"kind": "ClusterProfile"},
            "document 1 (x): kind: unknown kind 'ClusterProfile' "
            "(known: WorkflowTemplate, AddonProfile, InPlacePolicy, UpgradePolicy)",
        ),
        (
            {"apiVersion": "hooksvc/v1"},
            "document 1 (x): apiVersion: must be 'hooks.hooksvc.io/v1alpha1' or "
            "'hooksvc/v1alpha1', got 'hooksvc/v1'",
        ),
        (
            {"metadata": {"name": "x", "namespace": "default"}},
            "document 1 (x): metadata.namespace: unknown field (known: name, labels, annotations)",
        ),
        (
            {"metadata": {"name": "x", "labels": {"tier": 1}}},
            "document 1 (x): metadata.labels.tier: must be a string (quote numbers)",
        ),
        ({"metadata": {}}, "document 1: metadata.name: is required"),
        ({"spec": None}, "document 1 (x): spec: is required"),
        (
            {"status": {}},
            "document 1 (x): status: unknown field (known: apiVersion, kind, metadata, spec)",
        ),
    ],
)
def test_a_bad_document_envelope_is_rejected(changes: dict[str, Any], message: str) -> None:
    assert error_of(documents.dump({**documents.template("x"), **changes})) == message


def test_a_custom_resource_document_applies_as_the_same_template() -> None:
    """A file for `kubectl apply` (the CRDs' group, labels kustomize adds) is read alike."""
    plain = documents.template("x")
    resource = {
        **plain,
        "apiVersion": "hooks.hooksvc.io/v1alpha1",
        "metadata": {"name": "x", "labels": {"team": "platform"}, "annotations": {"a": "b"}},
    }
    [from_plain] = spec.parse(documents.dump(plain))
    [from_resource] = spec.parse(documents.dump(resource))
    assert from_resource == from_plain


def test_a_name_longer_than_63_characters_is_rejected() -> None:
    name = "a" * 64
    assert error_of(documents.dump(documents.template(name))).startswith(
        f"document 1 ({name}): metadata.name: must be a DNS-1123 label"
    )


def test_a_document_that_is_not_an_object_is_rejected() -> None:
    assert error_of("- just\n- a list\n") == "document 1: must be an object"


def test_duplicate_template_names_across_documents_are_rejected() -> None:
    text = documents.dump(documents.template("a"), documents.template("b"), documents.template("a"))
    assert error_of(text) == (
        "document 3 (a): metadata.name: duplicate WorkflowTemplate 'a' (also document 1)"
    )


def test_every_bad_document_is_reported_not_only_the_first() -> None:
    text = documents.dump(
        documents.template("a", hook="Nope"),
        documents.template("b"),
        documents.template("c", onFailure="Later"),
    )
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(text)
    assert [m.split(":")[0] for m in caught.value.messages] == ["document 1 (a)", "document 3 (c)"]


def test_yaml_syntax_errors_are_reported_with_their_line() -> None:
    text = "apiVersion: hooksvc/v1alpha1\nkind: WorkflowTemplate\nmetadata:\n  name: x\n  bad: [\n"
    assert error_of(text).startswith("invalid YAML at line 6, column 1: ")


def test_a_key_given_twice_is_an_error_not_a_silent_override() -> None:
    text = "apiVersion: hooksvc/v1alpha1\nkind: WorkflowTemplate\nkind: WorkflowTemplate\n"
    assert error_of(text) == "invalid YAML at line 3, column 1: duplicate key 'kind'"


def test_a_file_without_documents_is_rejected() -> None:
    assert error_of("# nothing here\n") == "no documents"
