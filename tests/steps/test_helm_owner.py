"""Whose Helm release it is: the real helm 3.17 against the emulator.

helm stores each revision of a release as a Secret labelled `owner=helm`, `name`,
`status`, `version` and the `--labels` of the command (helm v3.17.3 and v4.1
pkg/storage/driver/secrets.go `newSecretsObject`); an upgrade copies the previous
revision's labels into the new one (pkg/action/upgrade.go `mergeCustomLabels`), an install
starts afresh (install.go `createRelease`). A release whose newest revision has no
`hooksvc.io/run` label was installed by someone else: `addon_install` refuses it unless the
chart says `adopt: true`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.steps.conftest import Context, run
from tests.steps.test_helm import CHART, NS, chart, install, releases
from tests.support.kube import KubeEmulator
from workflows import errors
from workflows.steps import helm, registry

REFUSED = "installed by someone else, not hooksvc; set adopt: true to take it over"


def person(kube: KubeEmulator, tmp_path: Path, *args: str) -> None:
    """A person's helm command against the workload cluster (no hooksvc labels)."""
    config = tmp_path / "person-kubeconfig"
    kube.kubeconfig(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    for name in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{name}_HOME"] = str(tmp_path / f"person-{name.lower()}")
    subprocess.run(
        [helm.binary(), *args, "--kubeconfig", str(config)],
        env=env,
        check=True,
        capture_output=True,
    )


def statuses(kube: KubeEmulator, ns: str = NS) -> list[tuple[int, str]]:
    return sorted((r["version"], r["status"]) for r in releases(kube, ns))


def greeting(kube: KubeEmulator, ns: str = NS, release: str = "demo") -> Any:
    found = kube.get_object("", "v1", "configmaps", ns, f"{release}-hello") or {}
    return (found.get("data") or {}).get("greeting")


def test_a_release_someone_else_installed_is_refused_unless_the_chart_says_adopt(
    kube: KubeEmulator, context: Context, tmp_path: Path
) -> None:
    """`helm upgrade --install` upgrades any existing release (cmd/helm/upgrade.go), with
    the chart's values, not the ones it had (upgrade.go `reuseValues` keeps them only with
    --reuse-values), and addon_remove would then uninstall it. Refused, the release is
    untouched; adopted, it is upgraded and hooksvc's from then on."""
    person(kube, tmp_path, "install", "demo", CHART, "-n", NS, "--create-namespace",
           "--set", "greeting=hej")  # fmt: skip
    with pytest.raises(errors.PermanentError) as exc:
        run(install(context))
    assert exc.value.message == f"Helm release {NS}/demo: {REFUSED}"
    assert statuses(kube) == [(1, "deployed")]
    assert greeting(kube) == "hej"
    adopted = run(install(context, chart(adopt=True), run_id=8))
    assert isinstance(adopted, registry.Poll)
    assert statuses(kube) == [(1, "superseded"), (2, "deployed")]
    assert greeting(kube) == "bonjour"
    # Its newest revision now carries hooksvc's labels: another run needs no adopt.
    assert isinstance(run(install(context, run_id=9)), registry.Poll)
    assert statuses(kube) == [(1, "superseded"), (2, "superseded"), (3, "deployed")]


def test_a_release_uninstalled_with_its_history_kept_is_installed_anew_without_adopt(
    kube: KubeEmulator, context: Context, tmp_path: Path
) -> None:
    """cmd/helm/upgrade.go `isReleaseUninstalled`: `upgrade --install` installs a release
    whose newest revision is `uninstalled` (uninstall --keep-history) anew, with `Replace`
    (install.go `replaceRelease`: the next revision number, the old one superseded).
    Nobody's release is running: no adopt needed."""
    person(kube, tmp_path, "install", "demo", CHART, "-n", NS, "--create-namespace")
    person(kube, tmp_path, "uninstall", "demo", "-n", NS, "--keep-history")
    assert statuses(kube) == [(1, "uninstalled")]
    assert isinstance(run(install(context)), registry.Poll)
    assert statuses(kube) == [(1, "superseded"), (2, "deployed")]
    assert greeting(kube) == "bonjour"


def test_adopt_is_a_boolean() -> None:
    given = {"charts": [{"release": "demo", "chart": CHART, "adopt": "yes"}]}
    with pytest.raises(registry.ParamError) as exc:
        registry.validate("addon_install", given, hook="AfterControlPlaneInitialized")
    assert str(exc.value) == "charts: adopt must be a boolean"
