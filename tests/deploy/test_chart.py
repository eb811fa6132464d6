"""charts/hooksvc: it lints with every value set, installs what k8s/ installs (object for
object, but for the differences tests/deploy/chart.py lists), refuses bad values with a
message that names them, documents every value, and wires each option through.

The checks that hold for every rendering (restricted pods, requests and limits, no RBAC
wildcard, Kubernetes schemas, known entrypoint commands) run over each value set in
test_security, test_schemas and test_environment (`every_rendering`); the shape tests of
test_workloads over the chart as prod (`rendered`).
"""

from __future__ import annotations

import os
import re
import ssl
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from django.conf import settings

import hooksvc
from hooksvc.serving import devcerts, tls
from tests.deploy import chart, manifests, processes

#: The chart's labels that every object carries as k8s/ does.
OWN_LABELS = {"app.kubernetes.io/name": "hooksvc", "app.kubernetes.io/part-of": "hooksvc"}
#: The tag is the version (scripts/release.py sets the prod overlay's and the value sets' tags).
IMAGE = {
    "name": "hooksvc",
    "newName": "registry.example.com/hooksvc",
    "newTag": hooksvc.__version__,
}
#: The sign-in settings web gets (the identity work's names, hooksvc.settings.ENVIRONMENT).
IDENTITY_ENV = {
    "HOOKSVC_OIDC_ISSUER",
    "HOOKSVC_OIDC_CLIENT_ID",
    "HOOKSVC_OIDC_CLIENT_SECRET",
    "HOOKSVC_OIDC_SCOPES",
    "HOOKSVC_OIDC_GROUPS_CLAIM",
    "HOOKSVC_OIDC_CA_FILE",
    "HOOKSVC_LOCAL_LOGIN",
    "HOOKSVC_ROLES_FILE",
}


def _need_kubectl() -> None:
    if manifests.kubectl() is None:
        pytest.skip("kubectl is not installed (docs/deploy.md)")


# --- helm lint ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(chart.VALUE_SETS))
def test_helm_lint_passes_with_every_value_set(name: str) -> None:
    values = chart.VALUE_SETS[name]
    args = ["lint", "--strict", str(chart.CHART)]
    if values is not None:
        args += ["--values", str(values)]
    proc = chart.run(*args)
    assert proc.returncode == 0, f"{name}:\n{proc.stdout}\n{proc.stderr}"
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


# --- the same objects as k8s/ ---------------------------------------------------------------


def _assert_same_objects(kustomized: list[manifests.Obj], charted: list[manifests.Obj]) -> None:
    expected = chart.by_id(chart.without_hashes(kustomized))
    actual = chart.by_id(chart.without_hashes(chart.kustomize_view(charted)))
    assert sorted(actual) == sorted(expected), (
        f"only k8s/: {sorted(set(expected) - set(actual))}; "
        f"only the chart: {sorted(set(actual) - set(expected))}"
    )
    found = [f"{key}{d}" for key in expected for d in chart.differences(expected[key], actual[key])]
    assert not found, "the chart differs from k8s/:\n" + "\n".join(found[:40])


def test_the_chart_installs_what_the_prod_overlay_and_monitoring_install(tmp_path: Path) -> None:
    _need_kubectl()
    kustomized = manifests.render_overlay(tmp_path, resources=["overlays/prod", "monitoring"])
    _assert_same_objects(kustomized, chart.render(chart.VALUE_SETS["prod"]))


def test_the_rbac_values_install_what_the_two_components_install(tmp_path: Path) -> None:
    _need_kubectl()
    kustomized = manifests.render_overlay(
        tmp_path,
        resources=["base"],
        components=["namespaced-secrets", "management-steps"],
        images=[IMAGE],
    )
    _assert_same_objects(kustomized, chart.render(chart.VALUE_SETS["components"]))


def test_the_defaults_install_the_base_but_its_namespace(tmp_path: Path) -> None:
    _need_kubectl()
    kustomized = manifests.render_overlay(
        tmp_path, resources=["base"], images=[{"name": "hooksvc", "newTag": hooksvc.__version__}]
    )
    without = [o for o in kustomized if o["kind"] != "Namespace"]
    _assert_same_objects(without, chart.render())


def test_the_comparison_finds_a_changed_field() -> None:
    objects = chart.render(chart.VALUE_SETS["prod"])
    changed = chart.render(chart.VALUE_SETS["prod"], sets={"worker.concurrency": "5"})
    with pytest.raises(AssertionError, match=r"hooksvc-worker.*args\[2\]: k8s/ has '4'"):
        _assert_same_objects(chart.kustomize_view(objects), changed)


def test_the_crds_dashboard_alerts_and_role_rules_are_the_files_of_k8s() -> None:
    """One copy of each: the chart's files/ link to k8s/ (`make crds` writes k8s/base/crds)."""
    files = chart.CHART / "files"
    for name, target in {
        "crds": manifests.K8S / "base" / "crds",
        "prometheusrule.yaml": manifests.K8S / "monitoring" / "prometheusrule.yaml",
        "hooksvc-dashboard.json": manifests.K8S / "monitoring" / "hooksvc-dashboard.json",
        "roles.yaml": manifests.K8S / "base" / "roles.yaml",
    }.items():
        assert (files / name).is_symlink(), name
        assert (files / name).resolve() == target.resolve(), name
    rendered = {
        o["metadata"]["name"] for o in chart.render() if o["kind"] == "CustomResourceDefinition"
    }
    generated = {
        yaml.safe_load(p.read_text())["metadata"]["name"]
        for p in (manifests.K8S / "base" / "crds").glob("hooks.hooksvc.io_*.yaml")
    }
    assert rendered == generated


# --- bad values -----------------------------------------------------------------------------

REFUSED = [
    ({"web.replica": "3"}, "Additional property replica is not allowed"),
    ({"web.replicas": "1"}, "web.replicas: Must be greater than or equal to 2"),
    ({"worker.concurrency": "0"}, "worker.concurrency: Must be greater than or equal to 1"),
    ({"identity.oidc.issuer": "http://dex.example.com"}, "identity.oidc.issuer: Does not match"),
    (
        {"identity.oidc.issuer": "https://dex.example.com"},
        "identity.oidc.clientId is required with identity.oidc.issuer",
    ),
    (
        {"identity.localLogin": "false"},
        "identity.localLogin=false needs identity.oidc.issuer: nobody could sign in",
    ),
    ({"identity.oidc.scopes": "email profile"}, "identity.oidc.scopes: Does not match"),
    (
        {"identity.existing.enabled": "true", "identity.oidc.issuer": "https://dex.example.com"},
        "identity.oidc.issuer is not read with identity.existing.enabled: set it in the "
        "ConfigMap hooksvc-identity instead",
    ),
    (
        {
            "identity.existing.enabled": "true",
            "identity.roles[0].group": "sre",
            "identity.roles[0].roles[0]": "operator",
        },
        "identity.roles is not read with identity.existing.enabled",
    ),
    (
        {"identity.existing.enabled": "true", "identity.existing.configMap": ""},
        "identity.existing.configMap: Does not match",
    ),
    ({"rbac.secretsNamespaces[0]": "Team_A"}, "rbac.secretsNamespaces.0: Does not match"),
    ({"extensionConfig.settings.retries": "3"}, "Invalid type. Expected: string, given: integer"),
    ({"tls.issuerRef.kind": "Vault"}, "tls.issuerRef.kind must be one of"),
]


@pytest.mark.parametrize(("sets", "message"), REFUSED, ids=[str(r[0]) for r in REFUSED])
def test_bad_values_are_refused_naming_the_value(sets: dict[str, str], message: str) -> None:
    said = chart.refusal(*chart.template_args(sets=sets))
    assert message in said


# --- values documented ------------------------------------------------------------------------


def _keys_without_comment(text: str) -> list[str]:
    """Each `key:` line of a values file whose previous line is not a comment; the keys of a
    list item (`- key: ...` and its siblings) are data, not values of the chart."""
    lines = text.splitlines()
    bare = []
    key = re.compile(r"^( *)([A-Za-z][\w.-]*):")
    item = re.compile(r"^( *)- ")
    for index, line in enumerate(lines):
        match = key.match(line)
        if not match:
            continue
        indent = len(match.group(1))
        owner = next(
            (
                above
                for above in reversed(lines[:index])
                if above.strip()
                and not above.lstrip().startswith("#")
                and len(above) - len(above.lstrip()) < indent
            ),
            "",
        )
        in_item = item.match(owner)
        if in_item and len(in_item.group(1)) + 2 == indent:
            continue
        above = lines[index - 1].strip() if index else ""
        if not above.startswith("#"):
            bare.append(f"line {index + 1}: {match.group(2)}")
    return bare


def test_every_value_has_a_comment_in_values_yaml() -> None:
    text = (chart.CHART / "values.yaml").read_text()
    assert not _keys_without_comment(text), _keys_without_comment(text)
    sample = "a:\n  # b\n  b: 1\n  c: 2\n# d\nd:\n  - e: 1\n    f: 2\n"
    assert _keys_without_comment(sample) == ["line 1: a", "line 4: c"]


def _documented_values() -> dict[str, str]:
    page = (manifests.ROOT / "docs" / "helm.md").read_text()
    rows = re.findall(r"^\| `([A-Za-z.]+)` \| (.+) \|$", page, flags=re.MULTILINE)
    return dict(rows)


def test_the_docs_list_every_top_level_value() -> None:
    values: dict[str, Any] = yaml.safe_load((chart.CHART / "values.yaml").read_text())
    assert set(_documented_values()) == set(values), "docs/helm.md's table of values"


# --- each option wired through ------------------------------------------------------------------


def _web(objects: list[manifests.Obj], fullname: str = "hooksvc") -> manifests.Obj:
    return manifests.find(objects, "Deployment", f"{fullname}-web")


def _container(workload: manifests.Obj) -> manifests.Obj:
    [container] = manifests.pod_spec(workload)["containers"]
    found: manifests.Obj = container
    return found


def _env(container: manifests.Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _resolved(objects: list[manifests.Obj], container: manifests.Obj) -> dict[str, Any]:
    """The container's environment with values from ConfigMaps looked up."""
    env = _env(container)
    for name, value in env.items():
        ref = value.get("configMapKeyRef") if isinstance(value, dict) else None
        if ref is not None:
            env[name] = manifests.find(objects, "ConfigMap", ref["name"])["data"][ref["key"]]
    return env


def test_identity_values_give_web_the_sign_in_settings_and_the_role_rules(
    tmp_path: Path,
) -> None:
    """In k8s/'s shape: the settings in a ConfigMap, the client secret from an optional
    Secret, the rules in a ConfigMap mounted where HOOKSVC_ROLES_FILE points; the
    ConfigMaps' names carry a hash of their data, so that new settings roll the pods; the
    process the web pod would start reads them all."""
    values = yaml.safe_load(chart.VALUE_SETS["identity"].read_text())  # type: ignore[union-attr]
    objects = chart.render(chart.VALUE_SETS["identity"])
    web = _web(objects)
    env = _resolved(objects, _container(web))
    assert {name: env[name] for name in IDENTITY_ENV - {"HOOKSVC_OIDC_CLIENT_SECRET"}} == {
        "HOOKSVC_OIDC_ISSUER": "https://dex.example.com",
        "HOOKSVC_OIDC_CLIENT_ID": "hooksvc",
        "HOOKSVC_OIDC_SCOPES": "openid email profile groups",
        "HOOKSVC_OIDC_GROUPS_CLAIM": "groups",
        "HOOKSVC_OIDC_CA_FILE": "/etc/hooksvc/oidc-ca/ca.crt",
        "HOOKSVC_LOCAL_LOGIN": "0",
        "HOOKSVC_ROLES_FILE": "/etc/hooksvc/roles/roles.yaml",
    }
    assert env["HOOKSVC_OIDC_CLIENT_SECRET"] == {
        "secretKeyRef": {"name": "hooksvc-oidc", "key": "client-secret", "optional": True}
    }
    volumes = {v["name"]: v for v in manifests.pod_spec(web)["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in _container(web)["volumeMounts"]}
    rules = volumes[mounts["/etc/hooksvc/roles"]]["configMap"]["name"]
    configmap = manifests.find(objects, "ConfigMap", rules)
    assert yaml.safe_load(configmap["data"]["roles.yaml"]) == {"rules": values["identity"]["roles"]}
    assert volumes[mounts["/etc/hooksvc/oidc-ca"]]["configMap"] == {"name": "corp-ca"}
    # Other rules, or other settings, are another ConfigMap: the web pods roll.
    names = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    for sets in ({"identity.roles[0].group": "x"}, {"identity.oidc.groupsClaim": "roles"}):
        other = chart.render(chart.VALUE_SETS["identity"], sets=sets)
        changed = {o["metadata"]["name"] for o in other if o["kind"] == "ConfigMap"}
        assert len(changed - names) == 1, sets
        assert _web(other)["spec"]["template"] != web["spec"]["template"], sets
    ca = {"kind": "ConfigMap", "metadata": {"name": "corp-ca"}, "data": {"ca.crt": "PEM"}}
    started = processes.sign_in_settings(
        manifests.pod_environment(web, "web", [*objects, ENV_SECRET, CLIENT_CA, ca], tmp_path)
    )
    assert started["local_login"] is False
    assert started["rules"] == [
        ["platform-admins", ["admin"], None],
        ["team-payments", ["operator"], ["payments", "payments-staging"]],
    ]
    # Nothing else gets them.
    for workload in manifests.workloads(objects):
        for container in manifests.containers(workload):
            if container["name"] != "web":
                assert not IDENTITY_ENV & set(_env(container)), container["name"]


#: The Secret the operator creates before installing (docs/deploy.md, "Install").
ENV_SECRET: manifests.Obj = {
    "kind": "Secret",
    "metadata": {"name": "hooksvc-env"},
    "stringData": {
        "DATABASE_URL": "postgres://hooksvc@db.example.com/hooksvc",
        "CELERY_BROKER_URL": "redis://redis.example.com:6379/0",
        "HOOKSVC_SECRET_KEY": "not-used-here",
    },
}


#: The ConfigMap with the CA of CAPI's client certificate, which the operator creates
#: (docs/deploy.md, "Mutual TLS"); web does not start without it (mtls.enabled).
CLIENT_CA: manifests.Obj = {
    "kind": "ConfigMap",
    "metadata": {"name": "hooksvc-client-ca"},
    "data": {"ca.crt": "PEM"},
}


def test_the_defaults_are_local_accounts_only_and_k8s_base_role_rules(tmp_path: Path) -> None:
    """As k8s/base: the settings and k8s/base/roles.yaml in hashed ConfigMaps; the process
    the web pod would start signs in with local accounts only and grants no role."""
    objects = chart.render()
    web = _web(objects)
    volumes = {v["name"]: v for v in manifests.pod_spec(web)["volumes"]}
    rules = manifests.find(objects, "ConfigMap", volumes["roles"]["configMap"]["name"])
    assert rules["data"] == {"roles.yaml": (manifests.K8S / "base" / "roles.yaml").read_text()}
    env = manifests.pod_environment(web, "web", [*objects, ENV_SECRET, CLIENT_CA], tmp_path)
    assert IDENTITY_ENV - set(env) == {"HOOKSVC_OIDC_CLIENT_SECRET", "HOOKSVC_OIDC_CA_FILE"}
    assert processes.sign_in_settings(env) == {
        "issuer": "",
        "client_id": "",
        "client_secret": "",
        "scopes": ["openid", "email", "profile"],
        "groups_claim": "groups",
        "ca_file": "",
        "local_login": True,
        "rules": [],
    }


def _existing(objects: list[manifests.Obj]) -> list[manifests.Obj]:
    """The operator's objects of identity.existing, beside the chart's."""
    return [
        *objects,
        ENV_SECRET,
        CLIENT_CA,
        {
            "kind": "ConfigMap",
            "metadata": {"name": "hooksvc-identity"},
            "data": {
                "HOOKSVC_OIDC_ISSUER": "https://dex.example.com",
                "HOOKSVC_OIDC_CLIENT_ID": "hooksvc",
                "HOOKSVC_OIDC_CA_FILE": "/etc/hooksvc/oidc-ca/ca.crt",
                "HOOKSVC_LOCAL_LOGIN": "0",
                "HOOKSVC_ROLES_FILE": "/etc/hooksvc/roles/roles.yaml",
            },
        },
        {
            "kind": "Secret",
            "metadata": {"name": "hooksvc-oidc"},
            "stringData": {"client-secret": "from-the-secret"},
        },
        {
            "kind": "ConfigMap",
            "metadata": {"name": "hooksvc-roles"},
            "data": {"roles.yaml": "rules:\n  - {group: sre, roles: [operator]}\n"},
        },
        {"kind": "ConfigMap", "metadata": {"name": "corp-ca"}, "data": {"ca.crt": "PEM"}},
    ]


def test_with_existing_objects_web_reads_every_setting_from_them_or_does_without(
    tmp_path: Path,
) -> None:
    """identity.existing: no ConfigMap of the chart's; every sign-in setting is an optional
    reference to the operator's objects, so the pods start without them (local accounts
    only, no rules) and, with them, read them all (an `env` entry naming another source
    would shadow them, as it would an envFrom's)."""
    objects = chart.render(
        sets={"identity.existing.enabled": "true", "identity.oidc.caBundle.configMap": "corp-ca"}
    )
    assert not [o for o in objects if o["kind"] == "ConfigMap"]
    web = _web(objects)
    given = [*objects, ENV_SECRET, CLIENT_CA]
    alone = manifests.pod_environment(web, "web", given, tmp_path / "none")
    assert not alone.keys() & IDENTITY_ENV
    env = manifests.pod_environment(web, "web", _existing(objects), tmp_path / "all")
    assert processes.sign_in_settings(env) == {
        "issuer": "https://dex.example.com",
        "client_id": "hooksvc",
        "client_secret": "from-the-secret",
        "scopes": ["openid", "email", "profile"],
        "groups_claim": "groups",
        "ca_file": str(tmp_path / "all" / "oidc-ca" / "ca.crt"),
        "local_login": False,
        "rules": [["sre", ["operator"], None]],
    }
    assert Path(env["HOOKSVC_OIDC_CA_FILE"]).read_text() == "PEM"


def test_every_value_set_sets_only_variables_hooksvc_reads(
    every_rendering: dict[str, list[manifests.Obj]],
) -> None:
    known = set(settings.ENVIRONMENT)
    # The sign-in settings come with the identity work (issue 26); until hooksvc reads any
    # of them, the agreed names stand in, and once it reads one it must read them all.
    if not IDENTITY_ENV & known:
        known |= IDENTITY_ENV
    for name, workload in manifests.every_workload(every_rendering):
        if not manifests.is_hooksvc(workload):
            continue
        for container in manifests.containers(workload):
            unknown = set(_env(container)) - known
            assert not unknown, f"{name}: {manifests.id_of(workload)} sets {unknown}"


def test_the_operators_own_tls_rbac_and_labels_are_used() -> None:
    objects = chart.render(chart.VALUE_SETS["bring-your-own"])
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"Certificate", "Issuer", "NetworkPolicy", "ExtensionConfig"}
    assert "CustomResourceDefinition" not in kinds
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["example.com/team"] == "platform", manifests.id_of(obj)
        assert not chart.HELM_LABELS & set(labels), manifests.id_of(obj)
        assert obj["metadata"]["name"].startswith("capi-hooks"), manifests.id_of(obj)
    web = _web(objects, "capi-hooks")
    volumes = {v["name"]: v for v in manifests.pod_spec(web)["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "corp-webhook-tls"
    for workload in manifests.workloads(objects):
        spec = manifests.pod_spec(workload)
        assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
        assert spec["serviceAccountName"] == "capi-hooks"
        for container in manifests.containers(workload):
            env = _env(container)
            assert env["DATABASE_URL"] == {"secretKeyRef": {"name": "hooksvc-db", "key": "url"}}
            assert env["CELERY_BROKER_URL"] == {
                "secretKeyRef": {"name": "hooksvc-redis", "key": "url"}
            }
            assert env["HOOKSVC_SECRET_KEY"] == {
                "secretKeyRef": {"name": "hooksvc-django", "key": "key"}
            }
            assert env["HOOKSVC_LOG_LEVEL"] == "DEBUG"
            image = f"registry.example.com/platform/hooksvc:{hooksvc.__version__}"
            assert container["image"] == image
            assert container["imagePullPolicy"] == "IfNotPresent"


def test_a_cluster_issuer_and_prometheus_labels_are_used() -> None:
    objects = chart.render(chart.VALUE_SETS["issuer"])
    cert = manifests.find(objects, "Certificate", "hooksvc-webhook")
    assert cert["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}
    assert not [o for o in objects if o["kind"] == "Issuer"]
    monitored = [o for o in objects if o["kind"] in ("PodMonitor", "PrometheusRule")]
    assert len(monitored) == 4
    for obj in monitored:
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    roles = {
        (o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "Role"
    }
    assert roles == {
        ("team-a", "hooksvc-secrets"),
        ("team-b", "hooksvc-secrets"),
        (chart.NAMESPACE, "hooksvc-watcher-lease"),
    }
    assert "secrets" not in str(manifests.find(objects, "ClusterRole", "hooksvc")["rules"])


@pytest.mark.parametrize("name", list(chart.VALUE_SETS))
def test_every_reference_between_objects_resolves(name: str) -> None:
    """What one object names (ServiceAccount, Secret, Service, Role, Issuer, selectors)
    exists in the same rendering, for any release name."""
    objects = chart.render(chart.VALUE_SETS[name])
    ids = {(o["kind"], o["metadata"]["name"]) for o in objects}
    pods = [w["spec"]["template"]["metadata"]["labels"] for w in manifests.workloads(objects)]
    accounts = {n for k, n in ids if k == "ServiceAccount"}
    for _, workload in manifests.every_workload({name: objects}):
        assert manifests.pod_spec(workload)["serviceAccountName"] in accounts
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in ids
        for subject in binding["subjects"]:
            assert subject["name"] in accounts and subject["namespace"] == chart.NAMESPACE
    for obj in objects:
        selector = {
            "Service": lambda o: o["spec"]["selector"],
            "PodDisruptionBudget": lambda o: o["spec"]["selector"]["matchLabels"],
            "NetworkPolicy": lambda o: o["spec"]["podSelector"]["matchLabels"],
            "PodMonitor": lambda o: o["spec"]["selector"]["matchLabels"],
        }.get(obj["kind"])
        if selector is not None:
            wanted = selector(obj).items()
            assert any(wanted <= labels.items() for labels in pods), manifests.id_of(obj)
    certs = [o for o in objects if o["kind"] == "Certificate"]
    for cert in certs:
        issuer = cert["spec"]["issuerRef"]
        assert issuer["kind"] == "ClusterIssuer" or ("Issuer", issuer["name"]) in ids
        services = {n for k, n in ids if k == "Service"}
        assert {d.split(".")[0] for d in cert["spec"]["dnsNames"]} <= services
    for config in (o for o in objects if o["kind"] == "ExtensionConfig"):
        service = config["spec"]["clientConfig"]["service"]
        assert ("Service", service["name"]) in ids and service["namespace"] == chart.NAMESPACE
        secret = config["metadata"]["annotations"]["runtime.cluster.x-k8s.io/inject-ca-from-secret"]
        web_secret = next(
            v["secret"]["secretName"]
            for w in manifests.workloads(objects)
            for v in manifests.pod_spec(w).get("volumes", [])
            if v["name"] == "tls"
        )
        assert secret == f"{chart.NAMESPACE}/{web_secret}"
        assert not certs or {c["spec"]["secretName"] for c in certs} == {web_secret}
    for obj in objects:
        assert OWN_LABELS.items() <= obj["metadata"]["labels"].items(), manifests.id_of(obj)


# --- mutual TLS ------------------------------------------------------------------------------


def _probe_ports(container: manifests.Obj) -> dict[str, int]:
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    return {
        probe: ports[container[probe]["httpGet"]["port"]]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe")
    }


def test_by_default_the_hook_port_requires_client_certificates_and_the_probes_use_the_admin_port(
    tmp_path: Path,
) -> None:
    """mtls.enabled is the default (issue 33): web asks for a client certificate on the hook
    port, checked against the CA in the operator's ConfigMap; the probes, which the kubelet
    sends without a certificate, go to the admin port, which never asks. The process the pod
    would start builds those two contexts from the files the pod would have; without the
    ConfigMap the pod does not start (a rollout keeps the old pods)."""
    values: dict[str, Any] = yaml.safe_load((chart.CHART / "values.yaml").read_text())
    assert values["mtls"]["enabled"] is True
    objects = chart.render()
    web = _web(objects)
    container = _container(web)
    env = _env(container)
    admin = int(env["HOOKSVC_ADMIN_PORT"])
    assert env["HOOKSVC_TLS_CLIENT_AUTH"] == "1"
    assert set(_probe_ports(container).values()) == {admin}
    with pytest.raises(manifests.PodWouldNotStartError, match="hooksvc-client-ca"):
        manifests.pod_environment(web, "web", [*objects, ENV_SECRET], tmp_path / "none")
    ca_cert, ca_key = devcerts.make_ca("CAPI client CA")
    given = {**CLIENT_CA, "data": {"ca.crt": devcerts.cert_pem(ca_cert).decode()}}
    started = manifests.pod_environment(web, "web", [*objects, ENV_SECRET, given], tmp_path)
    serving = tmp_path / "serving"
    devcerts.write_serving_files(serving, ca_cert, *devcerts.issue(ca_cert, ca_key, "hooksvc"))
    with mock.patch.dict(os.environ, {**started, "HOOKSVC_TLS_DIR": str(serving)}):
        client_ca = tls.client_ca()
        listeners = tls.Listeners(tls.tls_dir(), client_ca=client_ca, admin_port=admin)
    assert client_ca is not None
    assert client_ca.read_text() == given["data"]["ca.crt"]
    assert listeners.for_port(9443).verify_mode == ssl.CERT_REQUIRED
    assert listeners.for_port(admin).verify_mode == ssl.CERT_NONE


def test_the_client_ca_can_come_from_another_configmap_and_key(tmp_path: Path) -> None:
    objects = chart.render(
        sets={"mtls.clientCA.configMap": "corp-capi-ca", "mtls.clientCA.key": "bundle.pem"}
    )
    web = _web(objects)
    ca = {"kind": "ConfigMap", "metadata": {"name": "corp-capi-ca"}, "data": {"bundle.pem": "X"}}
    env = manifests.pod_environment(web, "web", [*objects, ENV_SECRET, ca], tmp_path)
    assert Path(env["HOOKSVC_TLS_CLIENT_CA_FILE"]).read_text() == "X"


def test_mtls_off_takes_hook_calls_without_a_certificate_and_needs_no_client_ca(
    tmp_path: Path,
) -> None:
    objects = chart.render(sets={"mtls.enabled": "false"})
    web = _web(objects)
    container = _container(web)
    env = manifests.pod_environment(web, "web", [*objects, ENV_SECRET], tmp_path)
    assert "HOOKSVC_TLS_CLIENT_AUTH" not in env
    assert "client-ca" not in {v["name"] for v in manifests.pod_spec(web)["volumes"]}
    assert set(_probe_ports(container).values()) == {int(env["HOOKSVC_ADMIN_PORT"])}
