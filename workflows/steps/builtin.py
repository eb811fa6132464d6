"""Imports every built-in step type so that it registers itself."""

from __future__ import annotations

from workflows.steps import approval, http, noop, wait

__all__ = ["approval", "http", "noop", "wait"]
