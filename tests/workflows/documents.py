"""Builders of template documents and YAML files for the tests."""

from __future__ import annotations

import copy
from typing import Any

import yaml


def template(name: str = "backup-before-upgrade", **spec: Any) -> dict[str, Any]:
    """A valid WorkflowTemplate document; keyword arguments replace parts of its spec."""
    body: dict[str, Any] = {
        "hook": "BeforeClusterUpgrade",
        "clusterSelector": {"namespaces": ["prod"], "matchLabels": {"env": "prod"}},
        "steps": [
            {"name": "snapshot", "type": "wait", "with": {"seconds": 5}},
            {"name": "approve", "type": "approval", "dependsOn": ["snapshot"]},
        ],
    }
    body.update(copy.deepcopy(spec))
    return {
        "apiVersion": "hooksvc/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": name},
        "spec": body,
    }


def dump(*documents: dict[str, Any]) -> str:
    """A multi-document YAML file."""
    return yaml.safe_dump_all(documents, sort_keys=False)
