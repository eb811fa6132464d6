"""Imports every built-in step type so that it registers itself."""

from __future__ import annotations

from workflows.steps import approval, backup_pvs, conformance, http, k8s_job, noop, wait

__all__ = ["approval", "backup_pvs", "conformance", "http", "k8s_job", "noop", "wait"]
