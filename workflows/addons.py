"""Add-on profiles as workflow templates: the engine runs them, nothing else does.

A profile `<name>` becomes `addon-install-<name>` (AfterControlPlaneInitialized, waiting
for the installs of the profiles it depends on) and, unless it leaves its add-ons in
place, `addon-remove-<name>` (BeforeClusterDelete, waiting for the removals of the
profiles that depend on it: reverse dependency order, independent ones in parallel).
`RemovePolicies` removals never hold the lifecycle (`holdsLifecycle: false`);
`EnforceRemovePolicies` ones hold it until done, and a failure keeps holding.

`generate` is pure; `templates_sync` makes the generated rows match the stored profiles.
Called by `workflows.services` (apply_workflows) and the admin after a profile changes.
"""

from __future__ import annotations

from typing import Any

from workflows import spec
from workflows.models import AddonProfile, WorkflowTemplate

INSTALL_PREFIX = "addon-install-"
REMOVE_PREFIX = "addon-remove-"
MANAGED_PREFIX = "addonprofile:"
#: The step names the two templates use; addon_remove reads the install step's inventory.
INSTALL_STEP = "install"
REMOVE_STEP = "remove"


def managed_by(profile: str) -> str:
    return f"{MANAGED_PREFIX}{profile}"


def _template(name: str, raw: dict[str, Any]) -> dict[str, Any]:
    # Through the template validator, so a generated spec has the shape of an applied one.
    return spec.workflow_template(raw, name)


def generate(profiles: dict[str, dict[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Template name -> (profile, normalized template spec) for every profile given."""
    generated: dict[str, tuple[str, dict[str, Any]]] = {}
    for name in sorted(profiles):
        profile = profiles[name]
        common = {
            "clusterSelector": profile["clusterSelector"],
            "retryAfterSeconds": profile["retryAfterSeconds"],
        }
        install = INSTALL_PREFIX + name
        generated[install] = (
            name,
            _template(
                install,
                {
                    **common,
                    "hook": "AfterControlPlaneInitialized",
                    "waitFor": [INSTALL_PREFIX + dep for dep in profile["dependsOn"]],
                    "steps": [
                        {"name": INSTALL_STEP, "type": "addon_install", "with": profile["addons"]}
                    ],
                },
            ),
        )
        behaviour = profile["clusterDeletionBehavior"]
        if behaviour == "LeavePolicies":
            continue
        dependents = sorted(
            other
            for other, spec_ in profiles.items()
            if name in spec_["dependsOn"] and spec_["clusterDeletionBehavior"] != "LeavePolicies"
        )
        remove = REMOVE_PREFIX + name
        generated[remove] = (
            name,
            _template(
                remove,
                {
                    **common,
                    "hook": "BeforeClusterDelete",
                    "waitFor": [REMOVE_PREFIX + d for d in dependents],
                    "holdsLifecycle": behaviour == "EnforceRemovePolicies",
                    "steps": [
                        {
                            "name": REMOVE_STEP,
                            "type": "addon_remove",
                            "with": {"fromTemplate": install, "fromStep": INSTALL_STEP},
                        }
                    ],
                },
            ),
        )
    return generated


def templates_sync(*, dry_run: bool = False) -> dict[str, list[str]]:
    """Make the generated templates match the stored profiles; names by what changed.

    Runs in the caller's transaction. The generation is bumped only on a change, so
    syncing twice changes nothing; runs of deleted templates keep their snapshot.
    """
    profiles = {p.name: p.spec for p in AddonProfile.objects.all()}
    wanted = generate(profiles)
    existing = {
        t.name: t
        for t in WorkflowTemplate.objects.select_for_update().filter(
            managed_by__startswith=MANAGED_PREFIX
        )
    }
    report: dict[str, list[str]] = {"created": [], "updated": [], "deleted": []}
    for name, (profile, template_spec) in wanted.items():
        hook, owner = template_spec["hook"], managed_by(profile)
        template = existing.get(name)
        if template is None:
            report["created"].append(name)
            if not dry_run:
                WorkflowTemplate.objects.create(
                    name=name, hook=hook, spec=template_spec, managed_by=owner
                )
        elif template.spec != template_spec or template.hook != hook:
            report["updated"].append(name)
            if not dry_run:
                template.hook, template.spec = hook, template_spec
                template.generation += 1
                template.save(update_fields=["hook", "spec", "generation", "updated_at"])
    stale = sorted(set(existing) - set(wanted))
    report["deleted"] = stale
    if stale and not dry_run:
        WorkflowTemplate.objects.filter(name__in=stale).delete()
    return report


def clashes(profile_names: list[str]) -> list[str]:
    """Operator templates whose names generated templates would take."""
    names = [p + n for n in profile_names for p in (INSTALL_PREFIX, REMOVE_PREFIX)]
    return sorted(
        WorkflowTemplate.objects.filter(name__in=names, managed_by="").values_list(
            "name", flat=True
        )
    )
