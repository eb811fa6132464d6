"""A Helm chart add-on through the real worker, the real helm CLI and the emulator.

An AddonProfile installs tests/steps/charts/hello on AfterControlPlaneInitialized: the run
waits until the Deployment is rolled out (the test plays its controller) and records the
release's objects; BeforeClusterDelete holds until the profile's removal has uninstalled
the release and its objects are gone. A chart whose values the schema refuses fails its
run, and the hook's answer says so in fixed words, without helm's output.

(Named to run after test_outages.py: that module expects no worker to be running yet.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.addons.profiles import apply, profile
from tests.steps.conftest import NS, put_kubeconfig_secret
from tests.support import servers
from tests.support.kube import KubeEmulator
from tests.support.worker import Worker
from tests.workflows import documents
from tests.workflows.test_worker_addons import call_hook, wait_for
from workflows.models import Run, StepRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHART = str(Path(__file__).parent.parent / "steps" / "charts" / "hello")
WEB = "web"
DEPLOYMENT = ("apps", "v1", "deployments", WEB, "demo-hello")


def hello(**values: Any) -> dict[str, Any]:
    release = {"release": "demo", "chart": CHART, "namespace": WEB, "values": values}
    return {"charts": [release], "pollSeconds": 1}


def install() -> StepRun:
    return StepRun.objects.get(run__template_name="addon-install-hello")


@pytest.fixture
def cluster(kube: KubeEmulator) -> KubeEmulator:
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    put_kubeconfig_secret(kube)
    return kube


def test_a_chart_profile_installs_rolls_out_and_is_removed_before_deletion(
    hook_server: servers.HookServer, worker: Worker, cluster: KubeEmulator, tmp_path: Path
) -> None:
    kube = cluster
    apply(
        tmp_path,
        profile("hello", behaviour="EnforceRemovePolicies", addons=hello(replicaCount=2)),
    )
    call_hook(hook_server, "AfterControlPlaneInitialized")
    wait_for("the Deployment", lambda: kube.get_object(*DEPLOYMENT) is not None)
    deployment = kube.get_object(*DEPLOYMENT)
    assert deployment is not None and deployment["spec"]["replicas"] == 2
    wait_for("the rollout wait", lambda: install().message.startswith("waiting for 1 of 1"))
    assert Run.objects.get(template_name="addon-install-hello").state == "running"
    status = {"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}
    kube.set_status(*DEPLOYMENT[:3], WEB, "demo-hello", {"observedGeneration": 1, **status})
    wait_for("the install", lambda: install().state == "succeeded")
    inventory = install().output["inventory"]
    assert [(e.get("kind"), e.get("name")) for e in inventory] == [
        (None, None),
        ("ConfigMap", "demo-hello"),
        ("Service", "demo-hello"),
        ("Deployment", "demo-hello"),
    ]

    first = call_hook(hook_server, "BeforeClusterDelete")
    assert (first["status"], first["retryAfterSeconds"]) == ("Success", 1)
    wait_for(
        "the deletion to proceed",
        lambda: call_hook(hook_server, "BeforeClusterDelete")["retryAfterSeconds"] == 0,
    )
    removed = StepRun.objects.get(run__template_name="addon-remove-hello").output
    assert removed == {"removed": inventory}
    assert kube.get_object(*DEPLOYMENT) is None
    assert kube.get_object("", "v1", "services", WEB, "demo-hello") is None
    assert kube.get_object("", "v1", "configmaps", WEB, "demo-hello") is None
    helm_secrets = [
        s
        for s in kube.list_objects("", "v1", "secrets", WEB)
        if (s["metadata"].get("labels") or {}).get("owner") == "helm"
    ]
    assert helm_secrets == []


def test_a_chart_that_fails_is_reported_in_fixed_words(
    hook_server: servers.HookServer, worker: Worker, cluster: KubeEmulator, tmp_path: Path
) -> None:
    template = documents.template(
        "helm-before-upgrade",
        clusterSelector={},
        retryAfterSeconds=1,
        steps=[{"name": "addons", "type": "addon_install", "with": hello(replicaCount="two")}],
    )
    apply(tmp_path, template)

    def failed() -> bool:
        return "failed at step" in call_hook(hook_server, "BeforeClusterUpgrade").get("message", "")

    wait_for("the failure", failed)
    answer = call_hook(hook_server, "BeforeClusterUpgrade")
    run = Run.objects.get(template_name="helm-before-upgrade")
    assert (answer["status"], answer["retryAfterSeconds"]) == ("Success", 1)
    assert answer["message"] == (
        "workflow helm-before-upgrade failed at step addons: Helm release web/demo: values do"
        " not match the chart's schema; "
        f"retry it with `manage.py workflows retry {run.pk} --step addons`"
    )
    assert cluster.list_objects("apps", "v1", "deployments", WEB) == []
