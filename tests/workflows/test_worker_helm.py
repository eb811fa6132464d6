"""A Helm chart add-on through the real worker, the real helm CLI and the emulator.

An AddonProfile installs tests/steps/charts/hello on AfterControlPlaneInitialized: the run
waits until the Deployment is rolled out (the test plays its controller) and records the
release's objects; BeforeClusterDelete holds until the profile's removal has uninstalled
the release and its objects are gone. A chart whose values the schema refuses fails its
run, and the hook's answer says so in fixed words, without helm's output. A helm the test
kills with SIGKILL in the middle of an install leaves its revision pending; the attempt
undoes it and the step's next attempt installs the release.

(Named to run after test_outages.py: that module expects no worker to be running yet.)
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.addons.profiles import apply, profile
from tests.steps.conftest import NS, put_kubeconfig_secret
from tests.support import servers
from tests.support.kube import KubeEmulator
from tests.support.kube_apps import Operator
from tests.support.worker import Worker
from tests.workflows import documents
from tests.workflows.test_worker_addons import call_hook, wait_for
from workflows.models import Run, StepRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHART = str(Path(__file__).parent.parent / "steps" / "charts" / "hello")
WIDGETS_CHART = str(Path(__file__).parent.parent / "steps" / "charts" / "widgets")
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


def test_a_chart_shipping_a_custom_resource_is_removed_and_lets_the_deletion_go(
    hook_server: servers.HookServer, worker: Worker, cluster: KubeEmulator, tmp_path: Path
) -> None:
    """tests/steps/charts/widgets (the Widget CRD in crds/, an operator and a Widget in its
    templates), as helm v3.17.3 installs it (pkg/action/install.go `installCRDs`, then the
    templates); `kube_apps.Operator` clears its finalizer on a deleted Widget only while
    its Deployment runs. BeforeClusterDelete held forever before issue 23: the removal
    skipped the release's Widget in its custom resources tier and waited for it there,
    and never reached the uninstall."""
    kube = cluster
    kube.add_controller(
        Operator("example.com", "widgets", "example.com/cleanup", f"{WEB}/demo-operator")
    )
    widgets = {"release": "demo", "chart": WIDGETS_CHART, "namespace": WEB}
    addons = {"charts": [widgets], "waitForRollout": False, "pollSeconds": 1}
    apply(tmp_path, profile("widgets", behaviour="EnforceRemovePolicies", addons=addons))
    call_hook(hook_server, "AfterControlPlaneInitialized")
    installed = StepRun.objects.filter(run__template_name="addon-install-widgets")
    wait_for("the install", lambda: installed.filter(state="succeeded").exists())
    widget = kube.get_object("example.com", "v1", "widgets", WEB, "demo-main")
    assert widget is not None and widget["metadata"]["finalizers"] == ["example.com/cleanup"]
    wait_for(
        "the deletion to proceed",
        lambda: call_hook(hook_server, "BeforeClusterDelete")["retryAfterSeconds"] == 0,
    )
    removal = Run.objects.get(template_name="addon-remove-widgets")
    assert removal.state == "succeeded"
    assert kube.list_objects("example.com", "v1", "widgets") == []
    assert kube.get_object("apps", "v1", "deployments", WEB, "demo-operator") is None


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
        f"retry it with `.venv/bin/python manage.py workflows retry {run.pk} --step addons "
        '--reason "<why>"`'
    )
    assert cluster.list_objects("apps", "v1", "deployments", WEB) == []


def _children(pid: int) -> list[int]:
    """Every process below `pid` (its pool processes, their helm), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the parent pid follows it.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _helm_upgrades(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"/helm") and b"upgrade" in argv:
            found.append(child)
    return found


def _revisions(kube: KubeEmulator, ns: str) -> list[tuple[int, str]]:
    labels = [
        s["metadata"].get("labels") or {}
        for s in kube.list_objects("", "v1", "secrets", ns)
        if (s["metadata"].get("labels") or {}).get("owner") == "helm"
    ]
    return sorted((int(r["version"]), r["status"]) for r in labels)


def test_a_helm_killed_mid_install_is_undone_and_the_next_attempt_installs(
    hook_server: servers.HookServer, worker: Worker, cluster: KubeEmulator, tmp_path: Path
) -> None:
    """helm v3.17 records a release failed only on SIGINT/SIGTERM (cmd/helm/install.go's
    signal handler, pkg/action/install.go failRelease); SIGKILL leaves the revision
    pending-install and `upgrade --install` then fails with errPending
    (pkg/action/upgrade.go prepareUpgrade) on every attempt. The attempt that saw its helm
    killed uninstalls that first install, and the retry installs it."""
    kube, ns = cluster, "web-killed"
    # The first object's create hangs: helm is killed after it stored the pending revision.
    kube.delay_next("POST", f"/namespaces/{ns}/configmaps$", 5)
    started = time.monotonic()
    release = {"release": "demo", "chart": CHART, "namespace": ns, "values": {"replicaCount": 1}}
    step = {
        "name": "addons",
        "type": "addon_install",
        "retries": 2,
        "with": {"charts": [release], "waitForRollout": False, "pollSeconds": 1},
    }
    apply(
        tmp_path,
        documents.template("helm-killed", clusterSelector={}, retryAfterSeconds=1, steps=[step]),
    )
    call_hook(hook_server, "BeforeClusterUpgrade")
    wait_for("the pending revision", lambda: _revisions(kube, ns) == [(1, "pending-install")])
    assert worker.process is not None
    wait_for("helm", lambda: _helm_upgrades(worker.process.pid) if worker.process else [])
    [helm_pid] = _helm_upgrades(worker.process.pid)
    os.kill(helm_pid, signal.SIGKILL)

    def done() -> bool:
        return call_hook(hook_server, "BeforeClusterUpgrade").get("retryAfterSeconds") == 0

    wait_for("the install", done)
    addons = StepRun.objects.get(run__template_name="helm-killed")
    assert (addons.state, addons.failures) == ("succeeded", 1)
    assert _revisions(kube, ns) == [(1, "deployed")], "uninstalled, then installed afresh"
    log = worker.log()
    assert f"action=helm_killed what=Helm release {ns}/demo" in log
    assert f"action=helm_recovered what=Helm release {ns}/demo" in log
    assert "recovery=uninstalled" in log
    assert kube.get_object("apps", "v1", "deployments", ns, "demo-hello") is not None
    # The hung create ends within this test, whatever the emulator makes of it.
    time.sleep(max(0.0, started + 5.5 - time.monotonic()))


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    """Running, not a zombie nobody reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_helm_does_not_outlive_its_sigkilled_pool_process(
    hook_server: servers.HookServer, worker: Worker, cluster: KubeEmulator, tmp_path: Path
) -> None:
    """A pool process SIGKILLed mid-install (an out-of-memory kill) takes its helm along:
    helm runs under workflows/steps/childguard.py, which the kernel signals when the pool
    process's thread ends (prctl(2) PR_SET_PDEATHSIG) and which passes SIGTERM on; helm
    v3.17 then records the release failed (cmd/helm/install.go's signal handler,
    pkg/action/install.go failRelease) and exits. Before, helm was re-parented to init and
    kept installing beside whatever the next attempt did."""
    kube, ns = cluster, "web-orphan"
    kube.delay_next("POST", f"/namespaces/{ns}/configmaps$", 8)
    started = time.monotonic()
    release = {"release": "demo", "chart": CHART, "namespace": ns, "values": {"replicaCount": 1}}
    step = {"name": "addons", "type": "addon_install", "with": {"charts": [release]}}
    apply(tmp_path, documents.template("helm-orphan", clusterSelector={}, steps=[step]))
    call_hook(hook_server, "BeforeClusterUpgrade")
    wait_for("the pending revision", lambda: _revisions(kube, ns) == [(1, "pending-install")])
    wait_for("helm", lambda: _helm_upgrades(worker.process.pid) if worker.process else [])
    assert worker.process is not None
    [helm_pid] = _helm_upgrades(worker.process.pid)
    below = [helm_pid]  # helm, what runs it, up to the pool process
    while (parent := _parent(below[-1])) != worker.process.pid:
        below.append(parent)
    os.kill(below[-1], signal.SIGKILL)
    wait_for("helm to end", lambda: not any(map(_alive, below)), timeout=15)
    wait_for("helm's own record", lambda: (1, "failed") in _revisions(kube, ns), timeout=15)
    # The hung create ends within this test, whatever the emulator makes of it.
    time.sleep(max(0.0, started + 8.5 - time.monotonic()))
