"""Add-on profiles as workflow templates: the engine runs them, nothing else does.

A profile `<name>` becomes `addon-install-<name>` (AfterControlPlaneInitialized, waiting
for the installs of the profiles it depends on) and, unless it leaves its add-ons in
place, `addon-remove-<name>` (BeforeClusterDelete, waiting for the removals of the
profiles that depend on it: reverse dependency order, independent ones in parallel).
`RemovePolicies` removals never hold the lifecycle (`holdsLifecycle: false`);
`EnforceRemovePolicies` ones hold it until done, and a failure keeps holding.

`generate` is pure; `workflows.definitions.apply.templates_sync` writes what it returns
whenever a profile changes (apply_workflows, the admin, the resource controller).
"""

from __future__ import annotations

from typing import Any

from workflows.definitions import spec
from workflows.models import WorkflowTemplate

INSTALL_PREFIX = "addon-install-"
REMOVE_PREFIX = "addon-remove-"
PREFIXES = (INSTALL_PREFIX, REMOVE_PREFIX)
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


def clashes(profile_names: list[str]) -> list[str]:
    """Templates not generated (an operator's, a resource's) whose names profiles would take."""
    names = [p + n for n in profile_names for p in PREFIXES]
    return sorted(
        WorkflowTemplate.objects.filter(name__in=names)
        .exclude(managed_by__startswith=MANAGED_PREFIX)
        .values_list("name", flat=True)
    )
