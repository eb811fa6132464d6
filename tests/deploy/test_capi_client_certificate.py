"""k8s/capi-client: the CA and the client certificate CAPI's manager presents to the hook port
(mutual TLS, issue 33), and docs/deploy.md's steps that give them to CAPI and to hooksvc.

CAPI's runtime client presents the files of its manager's flags
--runtime-extension-client-cert-file and --runtime-extension-client-key-file
(kubernetes-sigs/cluster-api be7a74148c, PR #12517: main.go, internal/runtime/client/client.go;
at ae7ff047 core/main.go and controlplane/kubeadm/main.go); cert-manager writes a
Certificate's Secret as tls.crt, tls.key and ca.crt.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.deploy import chart, manifests

CAPI_NAMESPACE = "capi-system"
DEPLOY = manifests.ROOT / "docs" / "deploy.md"


@pytest.fixture(scope="module")
def objects() -> list[manifests.Obj]:
    if manifests.kubectl() is None:
        pytest.skip("kubectl is not installed (docs/deploy.md)")
    return manifests.render(manifests.K8S / "capi-client")


def _issuer_of(objects: list[manifests.Obj], cert: manifests.Obj) -> manifests.Obj:
    ref = cert["spec"]["issuerRef"]
    assert ref["kind"] == "Issuer", "a namespaced Issuer: a ClusterIssuer signs for anyone"
    return manifests.find(objects, "Issuer", ref["name"])


def test_the_client_certificate_is_signed_by_a_ca_of_its_own_in_capis_namespace(
    objects: list[manifests.Obj],
) -> None:
    assert {o["metadata"]["namespace"] for o in objects} == {CAPI_NAMESPACE}
    client = manifests.find(objects, "Certificate", "hooksvc-capi-client")
    assert "client auth" in client["spec"]["usages"]
    assert not client["spec"].get("isCA")
    ca_issuer = _issuer_of(objects, client)
    [ca] = [
        o
        for o in objects
        if o["kind"] == "Certificate"
        and o["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"]
    ]
    assert ca["spec"]["isCA"] is True
    # hooksvc holds a copy of the CA's certificate: renewals keep its key.
    assert ca["spec"]["privateKey"]["rotationPolicy"] == "Never"
    assert "selfSigned" in _issuer_of(objects, ca)["spec"]


def test_the_deploy_steps_use_these_objects_and_the_charts_configmap(
    objects: list[manifests.Obj],
) -> None:
    """The copy goes where web mounts it from (k8s/base, the chart's default), the patch
    mounts the client certificate's Secret and passes CAPI's two flags with its files."""
    text = DEPLOY.read_text()
    section = text.split("## Mutual TLS", 1)[1].split("\n## ", 1)[0]
    client = manifests.find(objects, "Certificate", "hooksvc-capi-client")
    ca_secret = _issuer_of(objects, client)["spec"]["ca"]["secretName"]
    assert f"get secret {ca_secret} -o jsonpath='{{.data.tls\\.crt}}'" in section
    values: dict[str, Any] = yaml.safe_load((chart.CHART / "values.yaml").read_text())
    configmap = values["mtls"]["clientCA"]["configMap"]
    assert f"create configmap {configmap} --from-file={values['mtls']['clientCA']['key']}=" in (
        section
    )
    web = manifests.find(manifests.render(manifests.K8S / "base"), "Deployment", "hooksvc-web")
    [volume] = [v for v in manifests.pod_spec(web)["volumes"] if v["name"] == "client-ca"]
    assert volume["configMap"]["name"] == configmap
    patch = yaml.safe_load(re.search(r"--type json -p '(\[.*?\])'", section, re.S)[1])  # type: ignore[index]
    [mounted] = [op["value"] for op in patch if op["path"].endswith("/volumes/-")]
    assert mounted["secret"]["secretName"] == client["spec"]["secretName"]
    [mount] = [op["value"] for op in patch if op["path"].endswith("/volumeMounts/-")]
    assert mount["name"] == mounted["name"]
    flags = [op["value"] for op in patch if op["path"].endswith("/args/-")]
    assert flags == [
        f"--runtime-extension-client-cert-file={mount['mountPath']}/tls.crt",
        f"--runtime-extension-client-key-file={mount['mountPath']}/tls.key",
    ]
