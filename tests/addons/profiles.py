"""Builders of AddonProfile documents, and applying them as `apply_workflows` does."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from django.core.management import call_command

from tests.workflows import documents

#: What each profile installs by default: one ConfigMap named after the profile.
NAMESPACE = "addons"


def config_map(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {"profile": name},
    }


def profile(
    name: str,
    *,
    depends_on: list[str] | None = None,
    behaviour: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "addons": {"manifests": [config_map(name)], "pollSeconds": 1},
        "retryAfterSeconds": 1,
    }
    if depends_on is not None:
        body["dependsOn"] = depends_on
    if behaviour is not None:
        body["clusterDeletionBehavior"] = behaviour
    body.update(spec)
    return {
        "apiVersion": "hooksvc/v1alpha1",
        "kind": "AddonProfile",
        "metadata": {"name": name},
        "spec": body,
    }


def apply(tmp_path: Path, *docs: dict[str, Any], options: tuple[str, ...] = ()) -> list[str]:
    path = tmp_path / "profiles.yaml"
    path.write_text(documents.dump(*docs))
    out = io.StringIO()
    call_command("apply_workflows", "-f", str(path), *options, stdout=out)
    return out.getvalue().splitlines()
