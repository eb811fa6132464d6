"""A helm the step stops, or finds stopped: the real helm 3.17 against the emulator.

What helm does when stopped (helm v3.17 cmd/helm/install.go and upgrade.go register SIGINT
and SIGTERM and cancel the operation; pkg/action/install.go `failRelease` and
upgrade.go `handleContext` then record the release `failed`; after SIGKILL the revision
stays `pending-install`/`pending-upgrade`, and upgrade.go `prepareUpgrade` refuses every
later operation with `errPending`), and what the step does about it: helm's own
`--timeout` below the deadline, SIGTERM at the deadline, and a pending revision of this
step undone (`helm rollback`, rollback.go, which does not check for a pending revision; or
`helm uninstall` of a first install) once no helm of an earlier attempt can still run. The
kill through a real worker is in tests/workflows/test_worker_helm.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from tests.steps.conftest import Context, at_epoch, run
from tests.steps.test_helm import CHART, VALUES, chart, install, releases
from tests.support.kube import KubeEmulator
from workflows import errors
from workflows.steps import helm, registry

BUSY = "another helm operation on the release is in progress"


def wait(what: str, condition: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def revision_labels(kube: KubeEmulator, ns: str) -> list[dict[str, str]]:
    found = [
        s["metadata"].get("labels") or {}
        for s in kube.list_objects("", "v1", "secrets", ns)
        if (s["metadata"].get("labels") or {}).get("owner") == "helm"
    ]
    return sorted(found, key=lambda labels: int(labels["version"]))


def statuses(kube: KubeEmulator, ns: str) -> list[tuple[int, str]]:
    return [
        (r["version"], r["status"]) for r in sorted(releases(kube, ns), key=lambda r: r["version"])
    ]


def killed_helm(
    kube: KubeEmulator, tmp_path: Path, labels: str, *, upgrade: bool = False, **values: Any
) -> float:
    """An earlier attempt whose worker died (or, without `labels`, a person's helm): helm
    SIGKILLed while it applies the release's objects, its revision left pending. The
    createdAt label of that revision."""
    config = tmp_path / "earlier-kubeconfig"
    kube.kubeconfig(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    for name in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{name}_HOME"] = str(tmp_path / f"earlier-{name.lower()}")
    # A request helm makes only after it stored the pending revision hangs: an install
    # creates the ConfigMap, an upgrade reads it first (pkg/kube/client.go Update).
    hang = 2.0
    if upgrade:
        kube.delay_next("GET", "/namespaces/web/configmaps/demo-hello$", hang)
    else:
        kube.delay_next("POST", "/namespaces/web/configmaps$", hang)
    started = time.monotonic()
    process = subprocess.Popen(
        [helm.binary(), "upgrade", "--install", "demo", CHART, "--namespace", "web"]
        + ["--create-namespace", "--kubeconfig", str(config)]
        + (["--labels", labels] if labels else [])
        + [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pending = wait(
            "the pending revision",
            lambda: [r for r in revision_labels(kube, "web") if r["status"].startswith("pending-")],
        )
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    # The hung request ends within this test, whatever the emulator makes of it.
    time.sleep(max(0.0, started + hang + 0.5 - time.monotonic()))
    return float(pending[-1]["createdAt"])


def at(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    at_epoch(monkeypatch, seconds)


def test_revisions_carry_the_steps_labels_and_helm_gets_a_timeout_below_the_deadline(
    kube: KubeEmulator, context: Context, tmp_path: Path
) -> None:
    """helm's `--timeout` bounds each hook and wait, not the command (upgrade.go flags), so it
    is set below hooksvc's deadline (300 s by default): a hung hook fails the release in helm
    itself. `--labels` lands on the release's Secret (pkg/storage/driver/secrets.go)."""
    log = tmp_path / "args"
    wrapper = tmp_path / "helm"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\nexec {helm.binary()} "$@"\n')
    wrapper.chmod(0o755)
    with override_settings(HELM_BINARY=str(wrapper)):
        assert isinstance(run(install(context)), registry.Poll)
    [upgrade] = [line for line in log.read_text().splitlines() if line.startswith("upgrade")]
    assert "--timeout 270s" in upgrade
    assert "--labels hooksvc.io/revision=1,hooksvc.io/run=7,hooksvc.io/step=addons" in upgrade
    [labels] = revision_labels(kube, "web")
    assert (labels["hooksvc.io/run"], labels["hooksvc.io/step"], labels["status"]) == (
        "7",
        "addons",
        "deployed",
    )
    assert labels["hooksvc.io/revision"] == labels["version"] == "1"


def test_at_the_deadline_helm_gets_sigterm_records_the_release_failed_and_the_retry_upgrades(
    kube: KubeEmulator, context: Context
) -> None:
    """SIGTERM makes helm cancel the install and record it `failed` (install.go
    failRelease); the next `upgrade --install` upgrades a failed first release
    (upgrade.go prepareUpgrade takes the last failed release as current)."""
    ns = "web-deadline"
    kube.delay_next("POST", f"/namespaces/{ns}/configmaps$", 8)
    started = time.monotonic()
    with override_settings(HELM_TIMEOUT_SECONDS=4), pytest.raises(errors.TemporaryError) as exc:
        run(install(context, chart(namespace=ns)))
    assert exc.value.message == f"Helm release {ns}/demo: helm did not finish in time"
    assert statuses(kube, ns) == [(1, "failed")], "recorded failed, not left pending"
    assert isinstance(run(install(context, chart(namespace=ns))), registry.Poll)
    assert statuses(kube, ns) == [(1, "superseded"), (2, "deployed")]
    # The hung create lands within this test (the next ones start from a clean emulator).
    wait("the hung create", lambda: time.monotonic() - started > 8.5, timeout=10)


def test_a_pending_install_left_by_an_earlier_attempt_is_undone_once_no_helm_can_still_run(
    kube: KubeEmulator, context: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After SIGKILL the revision stays pending-install and `upgrade --install` would fail
    with errPending forever. The step waits until the earlier helm is past hooksvc's deadline
    (300 s), its grace (15 s) and 30 s of clock slack, then uninstalls the first install
    (its objects with it) and installs."""
    labels = "hooksvc.io/revision=1,hooksvc.io/run=7,hooksvc.io/step=addons"
    created = killed_helm(kube, tmp_path, labels)
    assert statuses(kube, "web") == [(1, "pending-install")]
    at(monkeypatch, created + 10)
    with pytest.raises(errors.TemporaryError) as exc:
        run(install(context))
    assert exc.value.message == f"Helm release web/demo: {BUSY}"
    assert exc.value.delay == pytest.approx(335)
    assert statuses(kube, "web") == [(1, "pending-install")]
    at(monkeypatch, created + 346)
    assert isinstance(run(install(context)), registry.Poll)
    assert statuses(kube, "web") == [(1, "deployed")]
    [release] = releases(kube, "web")
    assert release["description"] == "hooksvc run 7 step addons"
    deployment = kube.get_object("apps", "v1", "deployments", "web", "demo-hello")
    assert deployment is not None and deployment["spec"]["replicas"] == VALUES["replicaCount"]


def test_a_pending_upgrade_is_rolled_back_to_the_deployed_revision_then_upgraded(
    kube: KubeEmulator, context: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pending-upgrade leaves the previous revision `deployed`; `helm rollback` to it
    (rollback.go prepareRollback does not refuse a pending last revision) makes a new
    deployed revision, and the upgrade then goes ahead."""
    assert isinstance(run(install(context)), registry.Poll)
    labels = "hooksvc.io/revision=2,hooksvc.io/run=8,hooksvc.io/step=addons"
    created = killed_helm(kube, tmp_path, labels, upgrade=True, replicaCount=5)
    assert statuses(kube, "web") == [(1, "deployed"), (2, "pending-upgrade")]
    at(monkeypatch, created + 400)
    again = run(install(context, chart(values={**VALUES, "replicaCount": 2}), run_id=8))
    assert isinstance(again, registry.Poll)
    assert statuses(kube, "web") == [
        (1, "superseded"),
        (2, "pending-upgrade"),
        (3, "superseded"),
        (4, "deployed"),
    ]
    deployment = kube.get_object("apps", "v1", "deployments", "web", "demo-hello")
    assert deployment is not None and deployment["spec"]["replicas"] == 2


def test_a_pending_revision_of_anyone_else_is_left_alone(
    kube: KubeEmulator, context: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not this step's (another run's labels): maybe still running elsewhere; only an
    operator can tell. The step keeps saying the release is busy, however old it is."""
    created = killed_helm(kube, tmp_path, "hooksvc.io/run=9,hooksvc.io/step=addons")
    at(monkeypatch, created + 10_000)
    with pytest.raises(errors.TemporaryError) as exc:
        run(install(context))
    assert exc.value.message == f"Helm release web/demo: {BUSY}"
    assert statuses(kube, "web") == [(1, "pending-install")]


def test_a_pending_upgrade_someone_else_started_on_this_steps_release_is_left_alone(
    kube: KubeEmulator, context: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """helm v3.17.3 and v4.1 pkg/action/upgrade.go `prepareUpgrade`: a new revision's labels
    are `mergeCustomLabels(lastRelease.Labels, u.Labels)`, so a person's `helm upgrade`
    (no --labels) copies this step's run and step labels into its revision. Its
    hooksvc.io/revision label is the copied one (1), not its own number (2): the step,
    started again (an operator's retry), does not take it for its own and roll it back
    while that helm may still run; it says the release is busy."""
    assert isinstance(run(install(context)), registry.Poll)
    created = killed_helm(kube, tmp_path, "", upgrade=True, replicaCount=5)
    [_, pending] = revision_labels(kube, "web")
    assert (pending["status"], pending["hooksvc.io/run"], pending["hooksvc.io/step"]) == (
        "pending-upgrade",
        "7",
        "addons",
    ), "copied from revision 1"
    at(monkeypatch, created + 10_000)
    with pytest.raises(errors.TemporaryError) as exc:
        run(install(context))
    assert exc.value.message == f"Helm release web/demo: {BUSY}"
    assert statuses(kube, "web") == [(1, "deployed"), (2, "pending-upgrade")]
