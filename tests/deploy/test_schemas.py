"""k8s/ renders with kubectl kustomize and every object matches its schema (the Helm chart's
and clusterctl's objects too).

Built-in kinds are checked with kubernetes-validate's bundled (strict) Kubernetes schemas;
the ExtensionConfig with the v1beta2 schema of CAPI's CRD in ../shared/capi/.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy import manifests

#: The oldest Kubernetes the manifests claim (docs/deploy.md) and the newest kubernetes-validate
#: 1.37.0 bundles schemas for.
KUBERNETES_VERSIONS = ("1.32", "1.37")
#: Kinds that come from CRDs (cert-manager, CAPI, prometheus-operator): kubernetes-validate
#: has no schema (test_monitoring checks the PrometheusRule's).
CRD_KINDS = {"Certificate", "Issuer", "ExtensionConfig", "PodMonitor", "PrometheusRule"}


def test_every_overlay_renders_the_objects_a_deployment_needs(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    for name, objects in rendered.items():
        kinds = {o["kind"] for o in objects}
        assert {
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Job",
            "Service",
            "PodDisruptionBudget",
            "Issuer",
            "Certificate",
            "ExtensionConfig",
            "NetworkPolicy",
        } <= kinds, name


def test_dev_runs_postgresql_and_redis_and_prod_does_not(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    names = {t: {manifests.id_of(o) for o in objs} for t, objs in rendered.items()}
    assert {"StatefulSet/hooksvc-postgres", "Deployment/hooksvc-redis"} <= names["dev"]
    assert not {n for n in names["prod"] if "postgres" in n or "redis" in n}


@pytest.fixture(scope="module", autouse=True)
def _schema_files_read_once() -> Iterator[None]:
    """kubernetes_validate reads the kind's schema and the version's _definitions.json (MBs
    of JSON) from disk on every validate() (kubernetes_validate/utils.py: validate calls
    schema_contents twice); read each file once for this module: the same schemas, which
    the validator only reads."""
    original = kubernetes_validate.utils.schema_contents
    kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(original)
    yield
    kubernetes_validate.utils.schema_contents = original


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_built_in_kinds_match_the_kubernetes_schemas(
    every_rendering: dict[str, list[manifests.Obj]], version: str
) -> None:
    for name, objects in every_rendering.items():
        for obj in objects:
            if obj["kind"] in CRD_KINDS:
                continue
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name}: {manifests.id_of(obj)} is invalid for {version}: {exc}")


def test_the_schema_check_rejects_an_unknown_field() -> None:
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "x"},
        "spec": {"template": {"spec": {"containers": [{"name": "x", "imagee": "x"}]}}},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSIONS[-1], strict=True)


def _extensionconfig_schema() -> dict[str, Any]:
    path = manifests.CAPI_DIR / "runtime.cluster.x-k8s.io_extensionconfigs.yaml"
    if not path.exists():
        pytest.skip(f"{path} is absent: CI clones shared/ beside the repository")
    crd = yaml.safe_load(Path(path).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def test_the_extensionconfig_matches_the_capi_crd(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    validator = jsonschema.Draft7Validator(_extensionconfig_schema())
    for name, objects in rendered.items():
        config = manifests.find(objects, "ExtensionConfig", "hooksvc")
        assert config["apiVersion"] == "runtime.cluster.x-k8s.io/v1beta2"
        errors = [e.message for e in validator.iter_errors(config)]
        assert not errors, f"{name}: {errors}"
        # Cluster-scoped: a namespace would be a kustomize transformer's mistake.
        assert "namespace" not in config["metadata"], name


def test_the_crd_check_rejects_a_service_without_a_name(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    validator = jsonschema.Draft7Validator(_extensionconfig_schema())
    broken = copy.deepcopy(manifests.find(rendered["base"], "ExtensionConfig", "hooksvc"))
    del broken["spec"]["clientConfig"]["service"]["name"]
    assert list(validator.iter_errors(broken))
