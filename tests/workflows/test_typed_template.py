"""The typed template: a stored spec read once into frozen values, the defaults in one place.

Covers: a validated document and its stored form read back to the same Template; a stored
spec that leaves fields out (an old row) reads the same defaults the validator fills in;
ClusterDeleted holds nothing by default; the hook path parses each distinct spec text once,
so a steady poll builds no Template and decodes no spec again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.support import capi
from tests.support import workflows as wf
from tests.workflows import documents
from workflows.definitions import spec, typed
from workflows.hookpath import answers

pytestmark = pytest.mark.django_db


def test_a_document_and_its_stored_form_read_the_same() -> None:
    [doc] = spec.parse(documents.dump(documents.template()))
    raw = documents.template()["spec"]
    assert typed.of(doc.spec) == spec.typed_template(raw, doc.name)
    assert typed.of(doc.spec).as_spec() == doc.spec


def test_a_spec_that_leaves_fields_out_reads_the_one_set_of_defaults() -> None:
    stored = {"hook": "BeforeClusterUpgrade", "steps": [{"name": "a", "type": "noop"}]}
    read = typed.of(stored)
    defaults = typed.Template(hook="BeforeClusterUpgrade")
    assert dataclasses.replace(read, steps=()) == defaults
    assert read.steps == (typed.Step(name="a", type="noop"),)
    assert (read.retry_after_seconds, read.on_failure, read.on_deadline) == (10, "Block", "Block")
    assert read.holds_lifecycle is True
    assert read.steps[0].retries == spec.DEFAULT_RETRIES == 3
    # Nulls, as the validator stores unset optional fields, read as unset.
    assert typed.of({**stored, "retryAfterSeconds": None}).retry_after_seconds == 10


def test_the_validator_stores_exactly_the_typed_defaults() -> None:
    doc = {"hook": "BeforeClusterDelete", "steps": [{"name": "a", "type": "noop"}]}
    assert spec.workflow_template(doc, "t") == typed.of(doc).as_spec()


def test_a_cluster_deleted_template_holds_nothing_by_default() -> None:
    stored = {"hook": typed.CLUSTER_DELETED, "steps": []}
    assert typed.of(stored).holds_lifecycle is False
    assert typed.of({**stored, "hook": "BeforeClusterDelete"}).holds_lifecycle is True


def test_the_person_wait_answers_its_own_value_or_the_templates() -> None:
    template = typed.Template(hook="BeforeClusterUpgrade", retry_after_seconds=30)
    assert template.person_retry_after_seconds == 30
    shorter = dataclasses.replace(template, approval_retry_after_seconds=5)
    assert shorter.person_retry_after_seconds == 5


def test_a_steady_hook_poll_decodes_and_builds_no_spec_again(
    monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    """Each distinct spec text is parsed once per process (jsonb prints one canonical text)."""
    wf.template("a", steps=[{"name": "x", "type": "wait", "with": {"seconds": 600}}])
    wf.template("b", retryAfterSeconds=20, steps=[{"name": "y", "type": "noop"}])
    call = wf.call(cluster=capi.cluster_v1beta2(name="c1", uid="uid-c1"))
    with django_capture_on_commit_callbacks(execute=False):
        first = answers.answer(call, handler_name="h")
    built: list[Any] = []
    real = typed._build

    def build(stored: Any) -> typed.Template:
        built.append(stored)
        return real(stored)

    monkeypatch.setattr(typed, "_build", build)
    for _ in range(3):
        assert answers.answer(call, handler_name="h") == first
    assert built == [], "a steady poll reads every spec from the cache"


def test_the_cache_keeps_a_bounded_number_of_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(typed, "CACHE_SIZE", 2)
    texts = [f'{{"hook": "BeforeClusterUpgrade", "retryAfterSeconds": {n}}}' for n in (1, 2, 3)]
    decoded = [typed.decode(t) for t in texts]
    assert typed.decode(texts[2]) is decoded[2], "the same text: the same dict"
    assert typed.of(decoded[2]).retry_after_seconds == 3
    assert texts[0] not in typed._by_text and id(decoded[0]) not in typed._by_identity
    assert typed.of(decoded[0]).retry_after_seconds == 1, "evicted: built again, still right"
