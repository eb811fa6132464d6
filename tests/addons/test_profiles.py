"""AddonProfile documents: validation, the templates they generate, and applying them.

Covers: bad profiles refused with the field named (addons checked as addon_install's
`with`), an unknown dependsOn and a dependsOn cycle refused at apply with the cycle named;
the generated templates' hooks and waitFor graphs for a chain, a diamond and independent
profiles under each clusterDeletionBehavior; applying twice changes nothing; editing a
profile regenerates; --prune of a profile deletes its templates; generated templates are
protected from apply and prune of ordinary templates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError
from django.db import transaction

from tests.addons.profiles import apply, profile
from tests.workflows import documents
from workflows.definitions import apply as writes
from workflows.definitions import spec
from workflows.models import AddonProfile, WorkflowTemplate

pytestmark = pytest.mark.django_db


def error_of(*docs: dict[str, Any]) -> str:
    with pytest.raises(spec.SpecError) as exc:
        spec.parse(documents.dump(*docs))
    return str(exc.value)


def wait_graph() -> dict[str, tuple[str, list[str]]]:
    """Generated template name -> (hook, waitFor)."""
    return {
        t.name: (t.hook, t.spec["waitFor"]) for t in WorkflowTemplate.objects.exclude(managed_by="")
    }


def test_a_profile_is_normalized_with_its_defaults() -> None:
    [doc] = spec.parse(documents.dump(profile("ingress")))
    assert doc.kind == "AddonProfile"
    assert doc.spec["clusterDeletionBehavior"] == "RemovePolicies"
    assert doc.spec["dependsOn"] == []
    assert doc.spec["addons"]["namespace"] == "default"
    assert doc.spec["addons"]["waitForRollout"] is True


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"addons": {"manifests": [{"kind": "ConfigMap"}]}},
            "spec.addons.manifests: item 0 must be a manifest with apiVersion, kind and "
            "metadata.name",
        ),
        ({"addons": {}}, "spec.addons.manifests: give manifests, configMapRef or charts"),
        ({"addons": []}, "spec.addons: must be an object"),
        (
            {"clusterDeletionBehavior": "Keep"},
            "spec.clusterDeletionBehavior: must be one of RemovePolicies, LeavePolicies, "
            "EnforceRemovePolicies, got 'Keep'",
        ),
        (
            {"dependsOn": ["ingress"]},
            "spec.dependsOn: a profile cannot depend on itself ('ingress')",
        ),
        (
            {"hook": "BeforeClusterDelete"},
            "spec.hook: unknown field (known: clusterSelector, dependsOn, "
            "clusterDeletionBehavior, addons, retryAfterSeconds)",
        ),
    ],
)
def test_a_bad_profile_is_refused_naming_the_field(changes: dict[str, Any], message: str) -> None:
    doc = profile("ingress")
    doc["spec"].update(changes)
    assert error_of(doc) == f"document 1 (ingress): {message}"


def test_a_profile_name_must_leave_room_for_the_generated_names() -> None:
    assert error_of(profile("p" * 41)) == (
        f"document 1 ({'p' * 41}): metadata.name: an AddonProfile name has at most 40 characters"
    )


def test_a_dependson_cycle_is_refused_at_apply_naming_the_cycle(tmp_path: Path) -> None:
    docs = (
        profile("a", depends_on=["b"]),
        profile("b", depends_on=["c"]),
        profile("c", depends_on=["a"]),
    )
    with pytest.raises(CommandError) as exc:
        apply(tmp_path, *docs)
    assert str(exc.value).endswith("AddonProfile dependsOn cycle: a -> b -> c -> a")
    assert not AddonProfile.objects.exists()
    assert not WorkflowTemplate.objects.exists()


def test_an_unknown_profile_in_dependson_is_refused_at_apply(tmp_path: Path) -> None:
    with pytest.raises(CommandError) as exc:
        apply(tmp_path, profile("ingress", depends_on=["cert-manager"]))
    assert str(exc.value).endswith(
        "AddonProfile 'ingress': spec.dependsOn: unknown AddonProfile 'cert-manager'"
    )
    assert not WorkflowTemplate.objects.exists()


def test_a_dependency_may_come_from_an_earlier_apply(tmp_path: Path) -> None:
    apply(tmp_path, profile("cert-manager"))
    apply(tmp_path, profile("ingress", depends_on=["cert-manager"]))
    assert wait_graph()["addon-install-ingress"] == (
        "AfterControlPlaneInitialized",
        ["addon-install-cert-manager"],
    )


def test_a_chain_installs_in_order_and_removes_in_reverse(tmp_path: Path) -> None:
    # a depends on b, b on c: install c, b, a; remove a, b, c.
    lines = apply(
        tmp_path,
        profile("a", depends_on=["b"]),
        profile("b", depends_on=["c"]),
        profile("c"),
    )
    assert lines[:3] == [
        "addonprofile/a created",
        "addonprofile/b created",
        "addonprofile/c created",
    ]
    assert "workflowtemplate/addon-remove-c generated" in lines
    assert wait_graph() == {
        "addon-install-a": ("AfterControlPlaneInitialized", ["addon-install-b"]),
        "addon-install-b": ("AfterControlPlaneInitialized", ["addon-install-c"]),
        "addon-install-c": ("AfterControlPlaneInitialized", []),
        "addon-remove-a": ("BeforeClusterDelete", []),
        "addon-remove-b": ("BeforeClusterDelete", ["addon-remove-a"]),
        "addon-remove-c": ("BeforeClusterDelete", ["addon-remove-b"]),
    }


def test_a_diamond_removes_both_middles_before_the_base(tmp_path: Path) -> None:
    apply(
        tmp_path,
        profile("top", depends_on=["left", "right"]),
        profile("left", depends_on=["base"]),
        profile("right", depends_on=["base"]),
        profile("base"),
    )
    graph = wait_graph()
    assert graph["addon-install-top"][1] == ["addon-install-left", "addon-install-right"]
    assert graph["addon-remove-top"][1] == []
    assert graph["addon-remove-left"][1] == ["addon-remove-top"]
    assert graph["addon-remove-right"][1] == ["addon-remove-top"]
    assert graph["addon-remove-base"][1] == ["addon-remove-left", "addon-remove-right"]


def test_independent_profiles_wait_for_nothing(tmp_path: Path) -> None:
    apply(tmp_path, profile("x"), profile("y"))
    assert {name: wait for name, (_, wait) in wait_graph().items()} == {
        "addon-install-x": [],
        "addon-install-y": [],
        "addon-remove-x": [],
        "addon-remove-y": [],
    }


def test_each_behaviour_gives_its_removal_template(tmp_path: Path) -> None:
    apply(
        tmp_path,
        profile("leave", behaviour="LeavePolicies"),
        profile("remove", behaviour="RemovePolicies", depends_on=["leave"]),
        profile("enforce", behaviour="EnforceRemovePolicies", depends_on=["remove"]),
    )
    removals = {t.name: t.spec for t in WorkflowTemplate.objects.filter(hook="BeforeClusterDelete")}
    assert sorted(removals) == ["addon-remove-enforce", "addon-remove-remove"]
    assert removals["addon-remove-remove"]["holdsLifecycle"] is False
    assert removals["addon-remove-remove"]["waitFor"] == ["addon-remove-enforce"]
    assert removals["addon-remove-enforce"]["holdsLifecycle"] is True
    assert removals["addon-remove-enforce"]["onFailure"] == "Block"
    assert removals["addon-remove-enforce"]["steps"][0]["with"] == {
        "fromTemplate": "addon-install-enforce",
        "fromStep": "install",
        "pollSeconds": 5,
    }
    install = WorkflowTemplate.objects.get(name="addon-install-leave")
    assert install.managed_by == "addonprofile:leave"
    assert install.spec["steps"][0]["type"] == "addon_install"


def test_a_dependent_that_leaves_its_addons_does_not_hold_up_removal(tmp_path: Path) -> None:
    apply(
        tmp_path,
        profile("base"),
        profile("kept", behaviour="LeavePolicies", depends_on=["base"]),
    )
    assert wait_graph()["addon-remove-base"][1] == []


def test_applying_twice_changes_nothing(tmp_path: Path) -> None:
    docs = (profile("a", depends_on=["b"]), profile("b"))
    apply(tmp_path, *docs)
    before = {t.name: (t.generation, t.updated_at) for t in WorkflowTemplate.objects.all()}
    assert apply(tmp_path, *docs) == ["addonprofile/a unchanged", "addonprofile/b unchanged"]
    after = {t.name: (t.generation, t.updated_at) for t in WorkflowTemplate.objects.all()}
    assert after == before


def test_editing_a_profile_regenerates_its_templates(tmp_path: Path) -> None:
    apply(tmp_path, profile("a"), profile("b"))
    lines = apply(tmp_path, profile("a", depends_on=["b"]), profile("b"))
    assert "addonprofile/a configured" in lines
    assert "workflowtemplate/addon-install-a regenerated" in lines
    assert "workflowtemplate/addon-remove-b regenerated" in lines
    assert WorkflowTemplate.objects.get(name="addon-install-a").generation == 2
    assert AddonProfile.objects.get(name="a").generation == 2
    lines = apply(tmp_path, profile("a", behaviour="LeavePolicies"), profile("b"))
    assert "workflowtemplate/addon-remove-a deleted" in lines


def test_pruning_a_profile_deletes_its_generated_templates(tmp_path: Path) -> None:
    apply(tmp_path, profile("a"), profile("b"))
    lines = apply(tmp_path, profile("b"), options=("--prune",))
    assert "addonprofile/a pruned" in lines
    assert sorted(WorkflowTemplate.objects.values_list("name", flat=True)) == [
        "addon-install-b",
        "addon-remove-b",
    ]


def test_pruning_templates_leaves_generated_ones_alone(tmp_path: Path) -> None:
    apply(tmp_path, profile("a"))
    apply(tmp_path, documents.template("mine"), options=("--prune",))
    # The file has no profiles, so --prune removes the profile (kubectl-style) and with
    # it its templates; ordinary templates are pruned as before.
    assert list(WorkflowTemplate.objects.values_list("name", "managed_by")) == [("mine", "")]
    apply(tmp_path, profile("a"), documents.template("mine"))
    lines = apply(tmp_path, profile("a"), options=("--prune",))
    assert "workflowtemplate/mine pruned" in lines
    assert sorted(WorkflowTemplate.objects.values_list("name", flat=True)) == [
        "addon-install-a",
        "addon-remove-a",
    ]


def test_a_template_cannot_take_a_generated_name(tmp_path: Path) -> None:
    apply(tmp_path, profile("a"))
    with pytest.raises(CommandError) as exc:
        apply(tmp_path, documents.template("addon-install-a"))
    assert str(exc.value).endswith(
        "document 1 (addon-install-a): metadata.name: the WorkflowTemplate 'addon-install-a' "
        "is generated from the AddonProfile 'a'; change the profile instead"
    )
    assert WorkflowTemplate.objects.get(name="addon-install-a").managed_by == "addonprofile:a"


def test_a_dry_run_reports_and_writes_nothing(tmp_path: Path) -> None:
    lines = apply(tmp_path, profile("a"), options=("--dry-run",))
    assert "addonprofile/a created (dry run)" in lines
    assert "workflowtemplate/addon-install-a generated (dry run)" in lines
    assert not AddonProfile.objects.exists()
    assert not WorkflowTemplate.objects.exists()


def test_a_profile_from_a_resource_is_neither_pruned_nor_overwritten_by_apply(
    tmp_path: Path,
) -> None:
    [doc] = spec.parse(documents.dump(profile("from-git")))
    with transaction.atomic():
        writes.profile_upsert(name="from-git", spec_=doc.spec, source=spec.RESOURCE)
        writes.templates_sync()
    with pytest.raises(CommandError) as exc:
        apply(tmp_path, profile("from-git", behaviour="LeavePolicies"))
    assert str(exc.value).endswith(
        "document 1 (from-git): metadata.name: the AddonProfile 'from-git' comes from the "
        "Kubernetes resource addonprofiles.hooks.hooksvc.io/from-git; rename one of them"
    )
    lines = apply(tmp_path, profile("mine", depends_on=["from-git"]), options=("--prune",))
    assert "addonprofile/mine created" in lines
    assert dict(AddonProfile.objects.values_list("name", "managed_by")) == {
        "from-git": "resource",
        "mine": "",
    }
    assert AddonProfile.objects.get(name="from-git").spec == doc.spec
