"""Templates in the admin: edited as their whole YAML document, validated as apply_workflows.

Covers: the change form shows the document (kind, metadata.name, spec with its defaults);
saving it unchanged keeps the generation, a change bumps it; invalid documents show the
messages `workflows.definitions.spec.parse` gives and change nothing; adding; renaming is refused.
"""

from __future__ import annotations

import html

import pytest
import yaml
from django.test import Client
from django.urls import reverse

from tests.support import workflows as wf
from workflows.definitions import spec
from workflows.models import WorkflowTemplate
from workflows.operators.admin.documents import template_document

pytestmark = pytest.mark.django_db


def change_url(template: WorkflowTemplate) -> str:
    return reverse("admin:workflows_workflowtemplate_change", args=[template.pk])


def save(client: Client, url: str, document: str) -> tuple[int, str]:
    response = client.post(url, {"document": document, "_save": "Save"})
    return response.status_code, response.content.decode()


def edited(template: WorkflowTemplate, **spec_fields: object) -> str:
    data = yaml.safe_load(template_document(template))
    data["spec"].update(spec_fields)
    text: str = yaml.safe_dump(data, sort_keys=False)
    return text


def test_the_change_form_shows_the_whole_yaml_document(admin_client: Client) -> None:
    template = wf.template(
        "backup", steps=[{"name": "snap", "type": "wait", "with": {"seconds": 5}}]
    )
    page = html.unescape(admin_client.get(change_url(template)).content.decode())
    assert "<textarea" in page
    assert "kind: WorkflowTemplate" in page
    assert "apiVersion: hooksvc/v1alpha1" in page
    assert "  name: backup" in page
    assert "  hook: BeforeClusterUpgrade" in page
    assert "retryAfterSeconds: 10" in page, "defaults are spelled out"


def test_saving_the_document_unchanged_keeps_the_generation(admin_client: Client) -> None:
    template = wf.template("backup")
    status, _ = save(admin_client, change_url(template), template_document(template))
    assert status == 302
    template.refresh_from_db()
    assert template.generation == 1


def test_saving_a_changed_document_updates_the_spec_and_bumps_the_generation(
    admin_client: Client,
) -> None:
    template = wf.template("backup")
    status, _ = save(admin_client, change_url(template), edited(template, retryAfterSeconds=30))
    assert status == 302
    template.refresh_from_db()
    assert (template.generation, template.spec["retryAfterSeconds"]) == (2, 30)
    status, _ = save(
        admin_client, change_url(template), edited(template, hook="BeforeClusterDelete")
    )
    template.refresh_from_db()
    assert (template.generation, template.hook) == (3, "BeforeClusterDelete")


@pytest.mark.parametrize(
    "change",
    [
        {"retryAfterSeconds": "soon"},
        {"onFailure": "Explode"},
        {
            "steps": [
                {"name": "a", "type": "noop", "dependsOn": ["b"]},
                {"name": "b", "type": "noop", "dependsOn": ["a"]},
            ]
        },
        {"steps": [{"name": "w", "type": "wait", "with": {"seconds": "x"}}]},
        {"colour": "blue"},
    ],
)
def test_an_invalid_document_shows_apply_workflows_messages_and_changes_nothing(
    admin_client: Client, change: dict[str, object]
) -> None:
    template = wf.template("backup")
    document = edited(template, **change)
    with pytest.raises(spec.SpecError) as raised:
        spec.parse(document)
    status, page = save(admin_client, change_url(template), document)
    assert status == 200
    for message in raised.value.messages:
        assert message in html.unescape(page), f"{message!r} not shown"
    template.refresh_from_db()
    assert (template.generation, template.spec) == (1, wf.spec())


def test_invalid_yaml_is_reported_with_its_line(admin_client: Client) -> None:
    template = wf.template("backup")
    status, page = save(admin_client, change_url(template), "kind: [unclosed\n")
    assert status == 200
    assert "invalid YAML at line" in page


def test_adding_a_template_from_its_document_starts_at_generation_one(
    admin_client: Client,
) -> None:
    add_url = reverse("admin:workflows_workflowtemplate_add")
    assert "kind: WorkflowTemplate" in admin_client.get(add_url).content.decode()
    document = template_document(WorkflowTemplate(name="fresh", spec=wf.spec()))
    status, _ = save(admin_client, add_url, document)
    assert status == 302
    template = WorkflowTemplate.objects.get(name="fresh")
    assert (template.hook, template.generation, template.spec) == (
        "BeforeClusterUpgrade",
        1,
        wf.spec(),
    )
    status, page = save(admin_client, add_url, document)
    assert status == 200 and "a WorkflowTemplate named &#x27;fresh&#x27; exists already" in page


def test_renaming_a_template_is_refused(admin_client: Client) -> None:
    template = wf.template("backup")
    document = template_document(template).replace("name: backup", "name: other", 1)
    status, page = save(admin_client, change_url(template), document)
    assert status == 200
    assert "cannot change from &#x27;backup&#x27;" in page
    assert WorkflowTemplate.objects.get().name == "backup"


def test_a_document_of_another_kind_is_refused_not_saved(admin_client: Client) -> None:
    template = wf.template("backup")
    profile = (
        f"apiVersion: {spec.API_VERSION}\nkind: AddonProfile\nmetadata: {{name: backup}}\n"
        "spec: {addons: {configMapRef: {namespace: addons, name: backup, key: manifests}}}\n"
    )
    status, page = save(admin_client, change_url(template), profile)
    assert status == 200
    assert "one WorkflowTemplate document is edited here" in page
    template.refresh_from_db()
    assert (template.generation, template.spec) == (1, wf.spec())
