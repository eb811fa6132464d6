"""clusterctl/: the files of hooksvc's RuntimeExtensionProvider release, held to clusterctl's
provider contract as Cluster API's own source states it (kubernetes-sigs/cluster-api at
ae7ff04: docs/book/src/developer/providers/contracts/clusterctl.md, and the code cited per
test), are what the chart renders (one source), and document every variable.

What clusterctl does with the components is modelled in tests/deploy/clusterctl.py from
cmd/clusterctl/client/repository/components.go and yamlprocessor/simple_processor.go.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import chart, clusterctl, manifests, processes
from tests.deploy.conftest import CLUSTERCTL_GIVEN

PROVIDER_LABEL = ("cluster.x-k8s.io/provider", "runtime-extension-hooksvc")


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(clusterctl.SCRIPT), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _installed(**given: str) -> list[manifests.Obj]:
    return clusterctl.install(clusterctl.components_text(), {**CLUSTERCTL_GIVEN, **given})


def test_the_committed_files_are_what_the_chart_renders() -> None:
    result = _script("--check", str(clusterctl.DIRECTORY))
    assert result.returncode == 0, result.stderr


def test_a_stale_file_fails_the_check_naming_make_clusterctl(tmp_path: Path) -> None:
    copy = clusterctl.write_copy(tmp_path)
    path = copy / "runtime-extension-components.yaml"
    path.write_text(path.read_text().replace("terminationGracePeriodSeconds: 35", "x: 1"))
    result = _script("--check", str(copy))
    assert result.returncode == 1
    assert result.stderr == (
        f"clusterctl-files: runtime-extension-components.yaml in {copy} differ from what the "
        "chart renders; regenerate them (make clusterctl)\n"
    )


def test_the_metadata_maps_this_release_series_to_the_v1beta2_contract() -> None:
    """clusterctl v1.11+ validates metadata.yaml: apiVersion clusterctl.cluster.x-k8s.io/
    v1alpha3, kind Metadata, at least one release series (contract doc, "Validation Rules").
    `clusterctl init` then looks up the series of the version it installs
    (cmd/clusterctl/client/cluster/installer.go, getProviderContract:
    GetReleaseSeriesForVersion, an error when none matches) and wants its contract among
    those compatible with the core provider's (internal/contract/version.go,
    GetCompatibleVersions: v1beta2 and, for now, v1beta1). hooksvc registers a v1beta2
    ExtensionConfig, so its contract is v1beta2."""
    meta = clusterctl.metadata()
    assert meta["apiVersion"] == "clusterctl.cluster.x-k8s.io/v1alpha3"
    assert meta["kind"] == "Metadata"
    chart_yaml = yaml.safe_load((chart.CHART / "Chart.yaml").read_text())
    major, minor = (int(p) for p in str(chart_yaml["appVersion"]).split(".")[:2])
    series = {(s["major"], s["minor"]): s["contract"] for s in meta["releaseSeries"]}
    assert series[(major, minor)] == "v1beta2"
    assert set(series.values()) <= {"v1beta1", "v1beta2"}
    config = manifests.find(_installed(), "ExtensionConfig", "hooksvc")
    assert config["apiVersion"] == "runtime.cluster.x-k8s.io/v1beta2"


def test_the_components_file_has_the_contracts_name_and_one_namespace() -> None:
    """Runtime extension providers release `runtime-extension-components.yaml` (contract
    doc, "Naming conventions"); the default target namespace is its one Namespace object
    (components.go, inspectTargetNamespace: more than one is an error)."""
    assert sorted(p.name for p in clusterctl.DIRECTORY.iterdir()) == [
        "metadata.yaml",
        "runtime-extension-components.yaml",
    ]
    assert clusterctl.target_namespace(_installed()) == "hooksvc-system"


def _documented_variables() -> dict[str, str | None]:
    page = (manifests.ROOT / "docs" / "clusterctl.md").read_text()
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \| ([^|]+) \|", page, flags=re.MULTILINE)
    return {name: None if d.strip() == "(required)" else d.strip().strip("`") for name, d in rows}


def test_every_variable_is_documented_with_its_default() -> None:
    """ "Each provider should create user facing documentation with the list of required
    variables" (contract doc, "Variables"): docs/clusterctl.md's table, both ways, defaults
    included."""
    used = clusterctl.references(clusterctl.components_text())
    assert _documented_variables() == used
    assert {name for name, default in used.items() if default is None} == set(CLUSTERCTL_GIVEN)
    generator = clusterctl.generator()
    assert {v.name: v.default for v in generator["VARIABLES"]} == used


def test_clusterctl_refuses_to_install_without_the_image_repository() -> None:
    """simple_processor.go, Process: a variable neither set nor defaulted is missing, and
    clusterctl stops naming it."""
    with pytest.raises(clusterctl.MissingVariablesError) as refused:
        clusterctl.install(clusterctl.components_text(), {})
    assert refused.value.args == (["HOOKSVC_IMAGE_REPOSITORY"],)


@pytest.mark.parametrize(
    "text",
    ["a: $${X}", "a: ${X:-y}", "a: ${X=y}", "a: ${X:=${Y}}", "a: ${ X }", "a: ${X"],
)
def test_the_model_refuses_forms_it_does_not_substitute(text: str) -> None:
    with pytest.raises(AssertionError):
        clusterctl.references(text)


def test_the_namespace_variable_moves_every_reference_to_the_namespace() -> None:
    """clusterctl moves namespaced objects, ClusterRoleBinding subjects and Certificate
    dnsNames to the target namespace (components.go, fixTargetNamespace, fixCertificate),
    but not the namespace an ExtensionConfig names for its Service and CA Secret: hence
    HOOKSVC_NAMESPACE, which sets them all."""
    objects = _installed(HOOKSVC_NAMESPACE="platform-hooks")
    assert clusterctl.target_namespace(objects) == "platform-hooks"
    text = yaml.safe_dump_all(objects)
    assert "hooksvc-system" not in text
    config = manifests.find(objects, "ExtensionConfig", "hooksvc")
    assert config["spec"]["clientConfig"]["service"]["namespace"] == "platform-hooks"
    annotation = config["metadata"]["annotations"]["runtime.cluster.x-k8s.io/inject-ca-from-secret"]
    assert annotation == "platform-hooks/hooksvc-webhook-tls"
    cert = manifests.find(objects, "Certificate", "hooksvc-webhook")
    assert cert["spec"]["dnsNames"][0] == "hooksvc-webhook-service.platform-hooks.svc"
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "ExtensionConfig",
    }
    for obj in objects:
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"]["namespace"] == "platform-hooks", manifests.id_of(obj)
    binding = manifests.find(objects, "ClusterRoleBinding", "hooksvc")
    assert binding["subjects"][0]["namespace"] == "platform-hooks"


def test_filled_in_values_keep_their_types() -> None:
    """What clusterctl writes is text: a number stays a string where Kubernetes wants one
    (the worker's args) and is a number where it wants one (replicas)."""
    objects = _installed(
        HOOKSVC_WORKER_CONCURRENCY="8",
        HOOKSVC_WEB_REPLICAS="5",
        HOOKSVC_WEB_MIN_AVAILABLE="4",
        HOOKSVC_WORKER_REPLICAS="6",
    )
    worker = manifests.find(objects, "Deployment", "hooksvc-worker")
    assert manifests.pod_spec(worker)["containers"][0]["args"] == ["worker", "--concurrency", "8"]
    assert worker["spec"]["replicas"] == 6
    assert manifests.find(objects, "Deployment", "hooksvc-web")["spec"]["replicas"] == 5
    assert manifests.find(objects, "PodDisruptionBudget", "hooksvc-web")["spec"] == {
        "minAvailable": 4,
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "hooksvc",
                "app.kubernetes.io/component": "web",
            }
        },
    }


def test_with_the_defaults_the_components_are_the_charts_objects() -> None:
    """One source: filled in with their defaults, the components are what the chart
    renders with the same values typed, but for the contract's container name."""
    generator = clusterctl.generator()
    values: dict[str, Any] = generator["values"]()
    for variable in generator["VARIABLES"]:
        default = CLUSTERCTL_GIVEN.get(variable.name, variable.default)
        typed: Any = int(default) if variable.integer else default
        for path in variable.values:
            *parents, leaf = path.split(".")
            node = values
            for key in parents:
                node = node[key]
            node[leaf] = typed
    expected = _chart_with(values)
    installed = _installed()
    web = manifests.find(installed, "Deployment", "hooksvc-web")
    assert [c["name"] for c in manifests.pod_spec(web)["containers"]] == ["manager"]
    manifests.pod_spec(web)["containers"][0]["name"] = "web"
    assert chart.by_id(installed) == chart.by_id(expected)


def _chart_with(values: dict[str, Any]) -> list[manifests.Obj]:
    proc = subprocess.run(
        [*_helm_template(), "--values", "-"],
        input=yaml.safe_dump(values),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def _helm_template() -> list[str]:
    return [chart.helm(), *chart.template_args()]


def test_the_extension_server_runs_in_a_container_named_manager() -> None:
    """ "The container that executes the controller/runtime extension server binary MUST
    be called `manager`" (contract doc, "Controllers & Watching namespace"): clusterctl
    init --wait-providers waits for the Deployments that have one
    (cmd/clusterctl/internal/util/objs.go, IsDeploymentWithManager)."""
    with_manager = [
        manifests.id_of(o)
        for o in _installed()
        if o["kind"] == "Deployment"
        and any(c["name"] == "manager" for c in manifests.pod_spec(o)["containers"])
    ]
    assert with_manager == ["Deployment/hooksvc-web"]


def test_the_crd_names_are_the_ones_clusterctl_accepts() -> None:
    """clusterctl refuses a CRD not named `<plural of the kind, lowercased>.<group>`
    (cmd/clusterctl/client/cluster/installer.go, validateCRDName; util/contract,
    CalculateCRDName with flect.Pluralize, which adds an s to these kinds, and turns a final
    consonant+y into -ies: gobuffalo/flect plural_rules.go, {"y", "ies"})."""
    crds = [o for o in _installed() if o["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 4
    for crd in crds:
        spec = crd["spec"]
        kind = spec["names"]["kind"].lower()
        plural = f"{kind[:-1]}ies" if kind.endswith("cy") else f"{kind}s"
        assert crd["metadata"]["name"] == f"{plural}.{spec['group']}"
        assert spec["names"]["plural"] == plural


def test_every_object_carries_the_provider_label() -> None:
    """ "The components YAML components should be labeled with cluster.x-k8s.io/provider"
    (contract doc, "Labels"), the value clusterctl itself sets (api/v1alpha3/labels.go,
    ManifestLabel: runtime-extension-<name>); and none of Helm's."""
    installed = _installed()
    assert {manifests.component(w) for w in manifests.workloads(installed)} == manifests.COMPONENTS
    for obj in installed:
        labels = obj["metadata"]["labels"]
        assert labels[PROVIDER_LABEL[0]] == PROVIDER_LABEL[1], manifests.id_of(obj)
        assert not chart.HELM_LABELS & set(labels), manifests.id_of(obj)


#: What the operator creates in hooksvc's namespace before installing (docs/deploy.md,
#: "Install"), and the sign-in objects docs/clusterctl.md describes.
ENV_SECRET: manifests.Obj = {
    "kind": "Secret",
    "metadata": {"name": "hooksvc-env"},
    "stringData": {
        "DATABASE_URL": "postgres://hooksvc@db.example.com/hooksvc",
        "CELERY_BROKER_URL": "redis://redis.example.com:6379/0",
        "HOOKSVC_SECRET_KEY": "not-used-here",
    },
}
#: The CA of CAPI's client certificate (docs/deploy.md, "Mutual TLS"): web needs it.
CLIENT_CA: manifests.Obj = {
    "kind": "ConfigMap",
    "metadata": {"name": "hooksvc-client-ca"},
    "data": {"ca.crt": "PEM"},
}
SIGN_IN_OBJECTS: list[manifests.Obj] = [
    {
        "kind": "ConfigMap",
        "metadata": {"name": "hooksvc-identity"},
        "data": {
            "HOOKSVC_OIDC_ISSUER": "https://dex.example.com",
            "HOOKSVC_OIDC_CLIENT_ID": "hooksvc",
            "HOOKSVC_OIDC_SCOPES": "openid email profile groups",
            "HOOKSVC_OIDC_CA_FILE": "/etc/hooksvc/oidc-ca/ca.crt",
            "HOOKSVC_ROLES_FILE": "/etc/hooksvc/roles/roles.yaml",
        },
    },
    {
        "kind": "Secret",
        "metadata": {"name": "hooksvc-identity"},
        "stringData": {"HOOKSVC_OIDC_CLIENT_SECRET": "from-the-secret"},
    },
    {
        "kind": "ConfigMap",
        "metadata": {"name": "hooksvc-roles"},
        "data": {"roles.yaml": "rules:\n  - {group: sre, roles: [operator, releaser]}\n"},
    },
    {"kind": "ConfigMap", "metadata": {"name": "hooksvc-oidc-ca"}, "data": {"ca.crt": "PEM"}},
]


def test_sign_in_settings_come_from_optional_objects_the_operator_keeps(tmp_path: Path) -> None:
    """No variable can leave single sign-on off by default (a variable with an empty
    default is required: simple_processor.go, Process), and `clusterctl upgrade` deletes
    every object carrying the provider's labels before it creates the new components
    (cmd/clusterctl/client/cluster/upgrader.go, doUpgrade; components.go, Delete), so web
    reads every sign-in setting from objects the operator creates, each optional: without
    them the pods start with local accounts only and no rules; with them, the process reads
    them all (no `env` entry of the components' own shadows them)."""
    installed = _installed()
    assert not [o for o in installed if o["kind"] == "ConfigMap"]
    web = manifests.find(installed, "Deployment", "hooksvc-web")
    alone = processes.sign_in_settings(
        manifests.pod_environment(
            web, "manager", [*installed, ENV_SECRET, CLIENT_CA], tmp_path / "none"
        )
    )
    assert (alone["issuer"], alone["local_login"], alone["rules"]) == ("", True, [])
    given = [*installed, ENV_SECRET, CLIENT_CA, *SIGN_IN_OBJECTS]
    env = manifests.pod_environment(web, "manager", given, tmp_path / "all")
    assert processes.sign_in_settings(env) == {
        "issuer": "https://dex.example.com",
        "client_id": "hooksvc",
        "client_secret": "from-the-secret",
        "scopes": ["openid", "email", "profile", "groups"],
        "groups_claim": "groups",
        "ca_file": str(tmp_path / "all" / "oidc-ca" / "ca.crt"),
        "local_login": True,
        "rules": [["sre", ["operator", "releaser"], None]],
    }
    assert Path(env["HOOKSVC_OIDC_CA_FILE"]).read_text() == "PEM"
