"""Add-on profiles through the real worker and the emulator: install, then remove in order.

A chain top -> mid -> base (top depends on mid, mid on base) with top and base
`EnforceRemovePolicies`, mid `RemovePolicies`, and an independent `LeavePolicies` profile.
CAPI calls AfterControlPlaneInitialized (the worker installs each profile's ConfigMap), then
BeforeClusterDelete: the hook holds until the enforced removals are done; the emulator's
request log shows top deleted before mid before base, each removal deleting exactly what
its install applied, and the left profile untouched.

(Named to run after test_outages.py: that module expects no worker to be running yet.)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.addons.profiles import NAMESPACE, apply, profile
from tests.steps.conftest import CLUSTER, CLUSTER_UID, NS, put_kubeconfig_secret
from tests.support import capi, servers
from tests.support.kube import KubeEmulator
from tests.support.worker import Worker
from workflows.models import Run, StepRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def call_hook(server: servers.HookServer, hook: str) -> dict[str, Any]:
    cluster = capi.cluster_v1beta2(name=CLUSTER, namespace=NS, uid=CLUSTER_UID)
    status, body = server.post(capi.hook_path(hook), capi.hook_request(hook, cluster))
    assert status == 200, body
    return body


def wait_for(what: str, predicate: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(0.3)


def states(hook: str) -> dict[str, str]:
    return dict(Run.objects.filter(hook=hook).values_list("template_name", "state"))


def test_profiles_install_in_order_and_removal_holds_and_runs_in_reverse_order(
    hook_server: servers.HookServer, worker: Worker, kube: KubeEmulator, tmp_path: Path
) -> None:
    for ns in (NS, NAMESPACE):
        kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    put_kubeconfig_secret(kube)
    apply(
        tmp_path,
        profile("top", behaviour="EnforceRemovePolicies", depends_on=["mid"]),
        profile("mid", behaviour="RemovePolicies", depends_on=["base"]),
        profile("base", behaviour="EnforceRemovePolicies"),
        profile("kept", behaviour="LeavePolicies"),
    )
    assert call_hook(hook_server, "AfterControlPlaneInitialized")["status"] == "Success"
    installs = {f"addon-install-{p}": "succeeded" for p in ("top", "mid", "base", "kept")}
    wait_for("the installs", lambda: states("AfterControlPlaneInitialized") == installs)
    names = [o["metadata"]["name"] for o in kube.list_objects("", "v1", "configmaps", NAMESPACE)]
    assert names == ["base", "kept", "mid", "top"]
    # Each install starts only once the one it depends on has finished.
    started = {
        r.template_name: r.started_at
        for r in Run.objects.filter(hook="AfterControlPlaneInitialized")
    }
    order = sorted(("base", "mid", "top"), key=lambda p: str(started[f"addon-install-{p}"]))
    assert order == ["base", "mid", "top"]

    first = call_hook(hook_server, "BeforeClusterDelete")
    assert (first["status"], first["retryAfterSeconds"]) == ("Success", 1)
    wait_for(
        "the deletion to proceed",
        lambda: call_hook(hook_server, "BeforeClusterDelete")["retryAfterSeconds"] == 0,
    )
    assert states("BeforeClusterDelete") == {
        "addon-remove-top": "succeeded",
        "addon-remove-mid": "succeeded",
        "addon-remove-base": "succeeded",
    }
    deletes = [path.split("?")[0] for method, path in kube.requests if method == "DELETE"]
    assert deletes == [
        f"/api/v1/namespaces/{NAMESPACE}/configmaps/{p}" for p in ("top", "mid", "base")
    ]
    names = [o["metadata"]["name"] for o in kube.list_objects("", "v1", "configmaps", NAMESPACE)]
    assert names == ["kept"]
    for name in ("top", "mid", "base"):
        installed = StepRun.objects.get(run__template_name=f"addon-install-{name}").output
        removed = StepRun.objects.get(run__template_name=f"addon-remove-{name}").output
        assert removed == {"removed": installed["inventory"]}, name
