"""Helm releases for the add-on steps, through the `helm` CLI when it is installed.

Why the CLI rather than a library: Helm is a Go program, and no maintained Python library
renders and installs charts the way it does (hooks, CRDs, upgrades, release history); the
CLI is the maintained implementation. It is not in hooksvc's image by default: a step that
needs it fails with "helm CLI not found" until the image has it on PATH. Each call writes
the workload cluster's kubeconfig to a private temporary file that is removed afterwards,
and messages never quote helm's output (it may name hosts or carry the API's own errors);
the log keeps its last lines.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil

# Runs the helm binary, never a shell.
import subprocess  # nosec B404
import tempfile
from collections.abc import Iterator
from typing import Any

import yaml

from workflows import errors, k8s
from workflows.steps import registry

logger = logging.getLogger(__name__)

#: Seconds one helm command may take; it returns once the objects are applied (no --wait).
TIMEOUT_SECONDS = 300


def binary() -> str:
    path = shutil.which("helm")
    if path is None:
        raise errors.PermanentError("helm CLI not found")
    return path


@contextlib.contextmanager
def _kubeconfig(ctx: registry.StepContext) -> Iterator[str]:
    content = k8s.workload_kubeconfig(str(ctx.cluster["namespace"]), str(ctx.cluster["name"]))
    fd, path = tempfile.mkstemp(prefix="hooksvc-kubeconfig-")  # created 0600
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(content)
        yield path
    finally:
        os.unlink(path)


def _run(ctx: registry.StepContext, args: list[str], what: str, stdin: str = "") -> str:
    helm = binary()
    with _kubeconfig(ctx) as kubeconfig:
        try:
            # Fixed binary, no shell, arguments from a validated spec.
            done = subprocess.run(  # noqa: S603  # nosec B603
                [helm, *args, "--kubeconfig", kubeconfig],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise errors.TemporaryError(f"{what}: helm did not finish in time") from None
    if done.returncode != 0:
        logger.warning(
            "helm failed",
            extra={"action": "helm_failed", "what": what, "stderr": done.stderr[-2000:]},
        )
        raise errors.TemporaryError(f"{what}: helm exited with code {done.returncode}")
    return done.stdout


def install(ctx: registry.StepContext, chart: dict[str, Any]) -> list[dict[str, Any]]:
    """`helm upgrade --install` the chart; return the manifests of the release's objects."""
    release, ns = chart["release"], chart["namespace"]
    args = ["upgrade", "--install", release, chart["chart"], "--namespace", ns]
    args += ["--create-namespace", "--values", "-"]
    if chart.get("repo"):
        args += ["--repo", chart["repo"]]
    if chart.get("version"):
        args += ["--version", chart["version"]]
    what = f"Helm release {ns}/{release}"
    _run(ctx, args, what, stdin=yaml.safe_dump(chart.get("values") or {}))
    manifest = _run(ctx, ["get", "manifest", release, "--namespace", ns], what)
    return [doc for doc in yaml.safe_load_all(manifest) if isinstance(doc, dict)]


def uninstall(ctx: registry.StepContext, release: str, namespace: str) -> None:
    what = f"Helm release {namespace}/{release}"
    _run(ctx, ["uninstall", release, "--namespace", namespace, "--ignore-not-found"], what)
