"""Imports every built-in step type so that it registers itself."""

from __future__ import annotations

from workflows.steps import (
    addon_install,
    addon_remove,
    approval,
    backup_pvs,
    conformance,
    gate,
    http,
    k8s_job,
    node_drain,
    node_job,
    nodes,
    noop,
    wait,
    window,
)

__all__ = [
    "addon_install",
    "addon_remove",
    "approval",
    "backup_pvs",
    "conformance",
    "gate",
    "http",
    "k8s_job",
    "node_drain",
    "node_job",
    "nodes",
    "noop",
    "wait",
    "window",
]
