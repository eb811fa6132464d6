"""AddonProfiles in the admin: edited as YAML like templates, regenerating their templates.

Covers: adding a profile generates its templates; a dependsOn cycle or an unknown profile
is refused with the cycle named; editing regenerates; deleting removes the generated
templates; generated templates cannot be edited or deleted in the template admin.
"""

from __future__ import annotations

import html
from pathlib import Path

import pytest
import yaml
from django.test import Client
from django.urls import reverse

from tests.addons.profiles import apply, profile
from workflows.models import AddonProfile, WorkflowTemplate

pytestmark = pytest.mark.django_db
ADD = "admin:workflows_addonprofile_add"


def post(client: Client, url: str, document: dict[str, object]) -> tuple[int, str]:
    response = client.post(url, {"document": yaml.safe_dump(document), "_save": "Save"})
    return response.status_code, html.unescape(response.content.decode())


def generated() -> list[str]:
    return sorted(WorkflowTemplate.objects.exclude(managed_by="").values_list("name", flat=True))


def test_adding_a_profile_generates_its_templates(admin_client: Client) -> None:
    status, _ = post(admin_client, reverse(ADD), profile("ingress"))
    assert status == 302
    assert generated() == ["addon-install-ingress", "addon-remove-ingress"]


def test_a_cycle_is_refused_naming_it(admin_client: Client, tmp_path: Path) -> None:
    apply(tmp_path, profile("a", depends_on=["b"]), profile("b"))
    url = reverse(
        "admin:workflows_addonprofile_change", args=[AddonProfile.objects.get(name="b").pk]
    )
    status, page = post(admin_client, url, profile("b", depends_on=["a"]))
    assert status == 200
    assert "AddonProfile dependsOn cycle: a -> b -> a" in page
    assert AddonProfile.objects.get(name="b").spec["dependsOn"] == []


def test_an_unknown_profile_is_refused(admin_client: Client) -> None:
    status, page = post(admin_client, reverse(ADD), profile("ingress", depends_on=["nope"]))
    assert status == 200
    assert "unknown AddonProfile 'nope'" in page
    assert not AddonProfile.objects.exists()


def test_editing_regenerates_and_deleting_removes_the_templates(
    admin_client: Client, tmp_path: Path
) -> None:
    apply(tmp_path, profile("ingress"))
    pk = AddonProfile.objects.get().pk
    status, _ = post(
        admin_client,
        reverse("admin:workflows_addonprofile_change", args=[pk]),
        profile("ingress", behaviour="LeavePolicies"),
    )
    assert status == 302
    assert generated() == ["addon-install-ingress"]
    response = admin_client.post(
        reverse("admin:workflows_addonprofile_delete", args=[pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert generated() == []


def test_generated_templates_cannot_be_edited_in_the_template_admin(
    admin_client: Client, tmp_path: Path
) -> None:
    apply(tmp_path, profile("ingress"))
    template = WorkflowTemplate.objects.get(name="addon-install-ingress")
    url = reverse("admin:workflows_workflowtemplate_change", args=[template.pk])
    response = admin_client.post(url, {"document": "x", "_save": "Save"})
    assert response.status_code == 403
    delete = reverse("admin:workflows_workflowtemplate_delete", args=[template.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert WorkflowTemplate.objects.filter(name="addon-install-ingress").exists()
