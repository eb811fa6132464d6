"""Fixtures of the step type tests: the emulator as management and workload cluster.

The management cluster is the emulator, reached through the kubeconfig file the
KUBECONFIG_PATH setting names; the workload cluster is the same emulator again, reached
through the `<cluster>-kubeconfig` Secret the test puts there as CAPI would.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import override_settings

from tests.support import capi, kube_workloads
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator
from workflows import clock
from workflows.engine import scheduling
from workflows.hookpath import runs as hook_runs
from workflows.kube import k8s
from workflows.models import Run
from workflows.steps import registry

#: The namespace of the Clusters of these tests, and their name.
NS = "fleet"
CLUSTER = "prod-eu-1"
CLUSTER_UID = "6f0c2a4e-2d7b-4c61-9a1e-0f5c1d2e3a4b"

Context = Callable[..., registry.StepContext]


def put_kubeconfig_secret(kube: KubeEmulator, cluster: str = CLUSTER) -> None:
    """The workload kubeconfig Secret CAPI writes, pointing at the emulator itself."""
    value = yaml.safe_dump(kube.kubeconfig()).encode()
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{cluster}-kubeconfig", "namespace": NS},
            "data": {"value": base64.b64encode(value).decode()},
        }
    )


@pytest.fixture(autouse=True)
def clusters(
    kube: KubeEmulator, kubeconfig_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KubeEmulator]:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kube.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    put_kubeconfig_secret(kube)
    k8s.forget_clients()
    with override_settings(KUBECONFIG_PATH=kubeconfig_path):
        yield kube
    k8s.forget_clients()


@pytest.fixture
def workloads(clusters: KubeEmulator) -> kube_workloads.Workloads:
    """One untainted Node, kube-scheduler, the kubelet and the Job controllers, switched on."""
    return kube_workloads.start(clusters)


def run_context(hook: str = "BeforeClusterUpgrade", **fields: Any) -> dict[str, Any]:
    """What the engine hands a step as `run_context`, as workflows.hookpath.selection builds it."""
    return {
        "hook": hook,
        "cluster": {
            "name": CLUSTER,
            "namespace": NS,
            "uid": CLUSTER_UID,
            "labels": {"env": "prod"},
            "annotations": {},
            "topologyVersion": "v1.30.0",
            "className": "quick-start",
            "classNamespace": NS,
        },
        "fromKubernetesVersion": "v1.30.0" if "Before" in hook and "Upgrade" in hook else "",
        "toKubernetesVersion": "v1.33.0" if "Before" in hook and "Upgrade" in hook else "",
        "kubernetesVersion": "",
        "controlPlaneUpgrades": [],
        "workersUpgrades": [],
        "settings": {},
        **fields,
    }


@pytest.fixture
def context() -> Context:
    """A StepContext for a step type, with its parameters validated as apply_workflows does."""

    def make(
        step_type: str,
        params: dict[str, Any] | None = None,
        *,
        hook: str = "BeforeClusterUpgrade",
        run_id: int = 7,
        step_name: str = "backup",
        memo: dict[str, Any] | None = None,
        **context_fields: Any,
    ) -> registry.StepContext:
        return registry.StepContext(
            run_id=run_id,
            step_name=step_name,
            step_type=step_type,
            params=registry.validate(step_type, params or {}, hook=hook),
            run_context=run_context(hook, **context_fields),
            memo=memo if memo is not None else {},
            attempt=1,
        )

    return make


def run(ctx: registry.StepContext) -> registry.Outcome:
    """Call the step function as the engine does."""
    return registry.get(ctx.step_type).run(ctx)


def start(hook: str, steps: list[dict[str, Any]], name: str = "t") -> Run:
    """A run of a template `name` with `steps` for the test cluster, advanced once in process."""
    template = wf.template(name, hook=hook, steps=steps)
    cluster = capi.cluster_v1beta2(name=CLUSTER, namespace=NS, uid=CLUSTER_UID)
    [run] = hook_runs.runs_ensure(templates=[template], call=wf.call(hook, cluster=cluster))
    scheduling.advance(run.pk)
    run.refresh_from_db()
    return run


def later(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Move the engine's clock `seconds` ahead."""
    moved = clock.now() + datetime.timedelta(seconds=seconds)
    monkeypatch.setattr(clock, "now", lambda: moved)


def at_epoch(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Hold the project's clock (workflows.clock) at `seconds` since the epoch."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    monkeypatch.setattr(clock, "now", lambda: moment)
