"""Every admin page says what it is and where it is, in the same words.

Titles name the page ("Hook calls", "Hook call BeforeClusterUpgrade prod/c1"), never Django's
defaults ("Select run to view", "View hook call"); breadcrumbs start with "Fleet" (the
admin's index is the fleet view) on hooksvc's pages and Django's alike, never "Home"; the
same things have one name: "Add-on profiles" (not Django's "Addon profiles") and "Bypasses"
(not "Break glass").
"""

from __future__ import annotations

import datetime
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.support import workflows as wf
from tests.workflows.runs import make_run
from workflows.models import AddonProfile, HookCall
from workflows.operators import bypasses

pytestmark = pytest.mark.django_db


@pytest.fixture
def pages(admin_user: User) -> dict[str, str]:
    """One page of each kind, by what it shows."""
    run = make_run(cluster="prod/c1", state="failed", steps=(("backup", "noop", "failed"),))
    template = wf.template("backup-before-upgrade")
    profile = AddonProfile.objects.create(name="cni", spec={"addons": []})
    call = HookCall.objects.create(
        hook="BeforeClusterUpgrade",
        handler="before-cluster-upgrade",
        cluster_key=run.cluster_key,
        cluster_namespace="prod",
        cluster_name="c1",
        moment=run.moment,
        status="Success",
        retry_after=10,
        message=run.message,
        latency_ms=2.0,
    )
    bypass = bypasses.bypass_open(
        hook="BeforeClusterUpgrade",
        duration=datetime.timedelta(hours=1),
        actor="ops:ann",
        reason="INC-42",
    )
    return {
        "Fleet: clusters held by hooksvc": reverse("admin:index"),
        "Runs": reverse("admin:workflows_run_changelist"),
        "Hook calls": reverse("admin:workflows_hookcall_changelist"),
        "Bypasses": reverse("admin:workflows_bypass_changelist"),
        "Workflow templates": reverse("admin:workflows_workflowtemplate_changelist"),
        "Add-on profiles": reverse("admin:workflows_addonprofile_changelist"),
        "Users": reverse("admin:auth_user_changelist"),
        "backup-before-upgrade on prod/c1": reverse("admin:workflows_run_change", args=[run.pk]),
        "Cluster prod/c1": reverse("admin:cluster", args=["prod", "c1"]),
        "Hook call BeforeClusterUpgrade prod/c1": reverse(
            "admin:workflows_hookcall_change", args=[call.pk]
        ),
        f"Bypass {bypass.pk} of BeforeClusterUpgrade": reverse(
            "admin:workflows_bypass_change", args=[bypass.pk]
        ),
        "Workflow template backup-before-upgrade": reverse(
            "admin:workflows_workflowtemplate_change", args=[template.pk]
        ),
        "Add-on profile cni": reverse("admin:workflows_addonprofile_change", args=[profile.pk]),
        "Retry failed steps": reverse("admin:workflows_run_action", args=[run.pk, "retry"]),
        "Password change": reverse("admin:password_change"),
    }


def test_each_page_has_its_own_title_and_breadcrumbs_from_the_fleet(
    admin_client: Client, pages: dict[str, str]
) -> None:
    for title, url in pages.items():
        page = admin_client.get(url).content.decode()
        assert f"<title>{title} | hooksvc</title>" in page, (url, re.findall("<title>.*", page))
        crumbs = re.search(r'<div class="breadcrumbs">(.*?)</div>', page, re.S)
        assert crumbs is not None, url
        trail = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", crumbs.group(1))).strip()
        assert trail.startswith("Fleet"), (url, trail)
        assert "Home" not in trail and "Workflows &rsaquo;" not in trail, (url, trail)
        if url != reverse("admin:index"):
            first = crumbs.group(1).strip()
            assert first.startswith('<a href="/admin/">Fleet</a>'), (url, trail)


def test_one_name_each_on_every_page(admin_client: Client, pages: dict[str, str]) -> None:
    for url in [*pages.values(), reverse("admin:app_list", args=["workflows"])]:
        page = admin_client.get(url).content.decode()
        assert "Addon profile" not in page and "addon profile" not in page, url
        assert "Break glass" not in page and "break glass" not in page, url
