"""The admin says where a template or profile comes from, and leaves other sources' alone.

Covers: a template or profile of a Kubernetes resource is shown read-only (its document as
text, no form) with where to change it, and cannot be changed or deleted here (403); an
operator's template keeps its editable document and says it was made here or by
apply_workflows; adding a template under a name a resource holds is refused naming the
resource.
"""

from __future__ import annotations

import html

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse

from tests.workflows import documents
from workflows.definitions import apply, spec
from workflows.models import AddonProfile, WorkflowTemplate

pytestmark = pytest.mark.django_db


def from_resource(name: str) -> WorkflowTemplate:
    [doc] = spec.parse(documents.dump(documents.template(name)))
    apply.template_upsert(name=name, spec_=doc.spec, source=spec.RESOURCE)
    return WorkflowTemplate.objects.get(name=name)


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def test_a_resource_template_is_read_only_and_says_where_to_change_it(
    admin_client: Client,
) -> None:
    template = from_resource("from-git")
    url = reverse("admin:workflows_workflowtemplate_change", args=[template.pk])
    shown = page(admin_client, url)
    assert (
        "This WorkflowTemplate comes from the Kubernetes resource "
        "workflowtemplates.hooks.hooksvc.io/from-git: change it there "
        "(kubectl edit workflowtemplates from-git, or in git)."
    ) in shown
    assert "<textarea" not in shown
    assert "kind: WorkflowTemplate" in shown and "hook: BeforeClusterUpgrade" in shown
    assert admin_client.post(url, {"document": "x", "_save": "Save"}).status_code == 403
    delete = reverse("admin:workflows_workflowtemplate_delete", args=[template.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert WorkflowTemplate.objects.get().generation == 1


def test_an_operator_template_stays_editable_and_says_so(admin_client: Client) -> None:
    [doc] = spec.parse(documents.dump(documents.template("mine")))
    apply.template_upsert(name="mine", spec_=doc.spec)
    template = WorkflowTemplate.objects.get()
    shown = page(
        admin_client, reverse("admin:workflows_workflowtemplate_change", args=[template.pk])
    )
    assert "This WorkflowTemplate was made with apply_workflows or the admin." in shown
    assert "<textarea" in shown


def test_adding_a_template_under_a_resource_s_name_is_refused_naming_it(
    admin_client: Client,
) -> None:
    from_resource("from-git")
    document = documents.dump(documents.template("from-git", concurrency=3))
    response = admin_client.post(
        reverse("admin:workflows_workflowtemplate_add"), {"document": document, "_save": "Save"}
    )
    assert response.status_code == 200
    assert (
        "metadata.name: a WorkflowTemplate named 'from-git' exists already: it comes from the "
        "Kubernetes resource workflowtemplates.hooks.hooksvc.io/from-git"
    ) in html.unescape(response.content.decode())
    assert WorkflowTemplate.objects.get().spec["concurrency"] is None


def test_a_resource_profile_is_read_only_and_says_where_to_change_it(
    admin_client: Client,
) -> None:
    body = {
        "addons": {
            "manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}]
        }
    }
    profile = spec.addon_profile(body, "edge")
    with transaction.atomic():
        apply.profile_upsert(name="edge", spec_=profile, source=spec.RESOURCE)
        apply.templates_sync()
    pk = AddonProfile.objects.get().pk
    url = reverse("admin:workflows_addonprofile_change", args=[pk])
    shown = page(admin_client, url)
    assert (
        "This AddonProfile comes from the Kubernetes resource addonprofiles.hooks.hooksvc.io/edge"
        in shown
    )
    assert "<textarea" not in shown
    assert admin_client.post(url, {"document": "x", "_save": "Save"}).status_code == 403
    delete = reverse("admin:workflows_addonprofile_delete", args=[pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    generated = WorkflowTemplate.objects.get(name="addon-install-edge")
    shown = page(
        admin_client, reverse("admin:workflows_workflowtemplate_change", args=[generated.pk])
    )
    assert (
        "This WorkflowTemplate is generated from the AddonProfile 'edge': change the profile."
        in shown
    )
