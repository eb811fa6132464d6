"""Rendering k8s/ with `kubectl kustomize` and walking the objects, for tests/deploy.

The tests read what `kubectl apply -k` would send, never the source files, so a patch in an
overlay is checked as well as the base it changes.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
#: Where CI keeps the CAPI reference data: shared/ is cloned beside the repository.
CAPI_DIR = ROOT.parent / "shared" / "capi"

#: Every kustomization a user applies, by the name the tests use.
TARGETS = {
    "base": K8S / "base",
    "dev": K8S / "overlays" / "dev",
    "prod": K8S / "overlays" / "prod",
}
#: Kinds that carry a pod template.
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")

Obj = dict[str, Any]


def kubectl() -> str | None:
    return shutil.which("kubectl")


def render(path: Path, *, unrestricted: bool = False) -> list[Obj]:
    """The objects `kubectl kustomize path` prints."""
    exe = kubectl()
    assert exe is not None
    cmd = [exe, "kustomize", str(path)]
    if unrestricted:
        # A kustomization outside k8s/ (a test's temporary overlay) refers back into it.
        cmd.append("--load-restrictor=LoadRestrictionsNone")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, f"kubectl kustomize {path} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def render_with_component(component: str, tmp_path: Path) -> list[Obj]:
    """The base with one of k8s/components/ added, as an operator's overlay would."""
    return render_overlay(tmp_path, resources=["base"], components=[component])


def render_overlay(
    tmp_path: Path,
    *,
    resources: Sequence[str],
    components: Sequence[str] = (),
    images: Sequence[Mapping[str, str]] = (),
) -> list[Obj]:
    """An operator's overlay in tmp_path: k8s/ kustomizations (`base`, `overlays/prod`,
    `monitoring`), components of k8s/components/, and `images:` entries."""
    rel = Path(os.path.relpath(K8S, tmp_path))
    kustomization: Obj = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [str(rel / r) for r in resources],
    }
    if components:
        kustomization["components"] = [str(rel / "components" / c) for c in components]
    if images:
        kustomization["images"] = [dict(i) for i in images]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return render(tmp_path, unrestricted=True)


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def workloads(objects: list[Obj]) -> Iterator[Obj]:
    return (o for o in objects if o["kind"] in WORKLOAD_KINDS)


def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: Obj) -> Iterator[Obj]:
    """Every container of the pod template, init containers included."""
    spec = pod_spec(workload)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def is_hooksvc(workload: Obj) -> bool:
    """A workload running the hooksvc image (not the dev overlay's PostgreSQL or Redis)."""
    labels = workload["spec"]["template"]["metadata"]["labels"]
    return bool(labels.get("app.kubernetes.io/name") == "hooksvc")


def id_of(obj: Obj) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


#: What every rendering runs, each named <release>-<component> (the chart's migration Job
#: carries its revision too: hooksvc-migrate-1).
COMPONENTS = frozenset({"beat", "watcher", "web", "worker", "migrate"})


def component(workload: Obj) -> str:
    """The hooksvc component a workload runs (its name without release and revision)."""
    name: str = workload["metadata"]["name"]
    parts = name.split("-")
    if parts[-1].isdigit():
        parts = parts[:-1]
    return parts[-1]


def every_workload(renderings: Mapping[str, list[Obj]]) -> list[tuple[str, Obj]]:
    """Every workload of every rendering, as (rendering, workload), once each rendering is
    checked to run hooksvc's COMPONENTS with a container each: a test that asserts in a loop
    over them then asserts about something (an empty rendering would pass it silently)."""
    assert renderings, "no rendering to check"
    found = []
    for name, objects in renderings.items():
        made = list(workloads(objects))
        ours = sorted(component(w) for w in made if is_hooksvc(w))
        assert ours == sorted(COMPONENTS), f"{name}: hooksvc's workloads are {ours}"
        for workload in made:
            assert list(containers(workload)), f"{name}: {id_of(workload)} has no container"
            found.append((name, workload))
    return found


class PodWouldNotStartError(Exception):
    """The kubelet's refusal: a reference that is not optional names no object or key."""


def _source(objects: list[Obj], kind: str, name: str) -> dict[str, str] | None:
    """A ConfigMap's or Secret's data as text, None when the rendering has no such object."""
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if not found:
        return None
    data: dict[str, str] = dict(found[0].get("data") or {})
    if kind == "Secret":
        data = {k: base64.b64decode(v).decode() for k, v in data.items()}
        data.update(found[0].get("stringData") or {})
    return data


def _key_ref(objects: list[Obj], kind: str, ref: Obj) -> str | None:
    data = _source(objects, kind, ref["name"])
    if data is not None and ref["key"] in data:
        return data[ref["key"]]
    if ref.get("optional"):
        return None
    raise PodWouldNotStartError(f"{kind} {ref['name']} has no key {ref['key']}")


def _volumes(spec: Obj, objects: list[Obj], root: Path) -> dict[str, Path]:
    """Each ConfigMap volume written under root/<volume> (kubernetes pkg/volume/configmap/
    configmap.go, SetUpAt: an optional ConfigMap that is missing is an empty volume;
    MakePayload: with `items`, only those keys, at their paths, and a missing key is an
    error unless the volume is optional)."""
    where: dict[str, Path] = {}
    for volume in spec.get("volumes", []):
        if "configMap" not in volume:
            continue
        source = volume["configMap"]
        data = _source(objects, "ConfigMap", source["name"])
        if data is None and not source.get("optional"):
            raise PodWouldNotStartError(f"ConfigMap {source['name']} is missing")
        files = {key: key for key in data or {}}
        if "items" in source and data is not None:
            files = {item["key"]: item["path"] for item in source["items"]}
            missing = set(files) - set(data)
            if missing and not source.get("optional"):
                raise PodWouldNotStartError(f"ConfigMap {source['name']} has no key {missing}")
        (root / volume["name"]).mkdir(parents=True)
        for key, path in files.items():
            if data is not None and key in data:
                (root / volume["name"] / path).write_text(data[key])
        where[volume["name"]] = root / volume["name"]
    return where


def _variables(container: Obj, objects: list[Obj]) -> dict[str, str]:
    """As kubernetes pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables: envFrom first,
    then each `env` entry, which wins; an optional reference to a missing object or key
    leaves the variable out (an `env` entry then sets nothing), any other is an error."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        kind = "ConfigMap" if "configMapRef" in source else "Secret"
        ref = source.get("configMapRef") or source["secretRef"]
        data = _source(objects, kind, ref["name"])
        if data is None and not ref.get("optional"):
            raise PodWouldNotStartError(f"{kind} {ref['name']} is missing")
        env.update(data or {})
    for entry in container.get("env", []):
        if "value" in entry:
            value: str | None = entry["value"]
        elif "configMapKeyRef" in entry["valueFrom"]:
            value = _key_ref(objects, "ConfigMap", entry["valueFrom"]["configMapKeyRef"])
        else:
            value = _key_ref(objects, "Secret", entry["valueFrom"]["secretKeyRef"])
        if value is not None:
            env[entry["name"]] = value
    return env


def pod_environment(
    workload: Obj, container: str, objects: list[Obj], root: Path
) -> dict[str, str]:
    """The variables a container of `workload` would be started with, given `objects` in
    its namespace, as the kubelet gives them; its ConfigMap volumes are written under root,
    and a value under a mount path points there instead, so that a local process reads the
    files the pod would."""
    spec = pod_spec(workload)
    [found] = [c for c in spec["containers"] if c["name"] == container]
    where = _volumes(spec, objects, root)
    mounts = {m["mountPath"]: where[m["name"]] for m in found["volumeMounts"] if m["name"] in where}
    env = _variables(found, objects)
    for name, value in env.items():
        for path, local in mounts.items():
            if value.startswith(path + "/"):
                env[name] = str(local / value.removeprefix(path + "/"))
    return env
