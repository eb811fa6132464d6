"""Requests of the in-place update and upgrade-plan hooks, shaped as Cluster API sends them.

The objects carry apiVersion, kind, metadata (name, namespace, labels, annotations) and spec
only: CAPI strips UID, status and everything else (kubernetes-sigs/cluster-api
core/reconcilers/machine/machine_controller_inplace_update.go cleanupMachine and
cleanupUnstructured; KCP's inplace_canupdatemachine.go createRequest). Machines are
cluster.x-k8s.io/v1beta2 (api/core/v1beta2 machine_types.go: spec.clusterName,
bootstrap.configRef and infrastructureRef with apiGroup), bootstrap configs KubeadmConfig
bootstrap.cluster.x-k8s.io/v1beta2.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.support import capi

MACHINE_API = "cluster.x-k8s.io/v1beta2"
BOOTSTRAP_API = "bootstrap.cluster.x-k8s.io/v1beta2"
INFRA_API = "infrastructure.cluster.x-k8s.io/v1beta2"


def machine(
    name: str = "md-0-abcde",
    namespace: str = "fleet",
    *,
    cluster: str = "prod-eu-1",
    version: str = "v1.33.0",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": MACHINE_API,
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster, **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "clusterName": cluster,
            "bootstrap": {
                "configRef": {
                    "apiGroup": "bootstrap.cluster.x-k8s.io",
                    "kind": "KubeadmConfig",
                    "name": name,
                },
                "dataSecretName": name,
            },
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "DockerMachine",
                "name": name,
            },
            "version": version,
            "providerID": f"docker:////{name}",
            "deletion": {"nodeDrainTimeoutSeconds": 300},
        },
    }


def kubeadm_config(
    name: str = "md-0-abcde",
    namespace: str = "fleet",
    *,
    files: list[dict[str, Any]] | None = None,
    etcd_tag: str = "3.5.21-0",
) -> dict[str, Any]:
    return {
        "apiVersion": BOOTSTRAP_API,
        "kind": "KubeadmConfig",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "clusterConfiguration": {"etcd": {"local": {"imageTag": etcd_tag}}},
            "joinConfiguration": {
                "nodeRegistration": {"kubeletExtraArgs": [{"name": "v", "value": "2"}]}
            },
            "files": files if files is not None else [{"path": "/etc/motd", "content": "hello"}],
            "preKubeadmCommands": ["echo pre"],
        },
    }


def docker_machine(
    name: str = "md-0-abcde", namespace: str = "fleet", *, image: str = "kindest/node:v1.33.0"
) -> dict[str, Any]:
    return {
        "apiVersion": INFRA_API,
        "kind": "DockerMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"customImage": image, "providerID": f"docker:////{name}"},
    }


def objects(**changes: Any) -> dict[str, Any]:
    """current/desired objects of CanUpdateMachine and UpdateMachine."""
    return {
        "machine": machine(**changes.get("machine", {})),
        "infrastructureMachine": docker_machine(**changes.get("infra", {})),
        "bootstrapConfig": kubeadm_config(**changes.get("bootstrap", {})),
    }


def _template(
    kind: str, api: str, name: str, namespace: str, spec: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": {"spec": spec}},
    }


def set_objects(
    name: str = "md-0-7f9c",
    namespace: str = "fleet",
    *,
    version: str = "v1.33.0",
    labels: dict[str, str] | None = None,
    files: list[dict[str, Any]] | None = None,
    image: str = "kindest/node:v1.33.0",
) -> dict[str, Any]:
    """current/desired objects of CanUpdateMachineSet."""
    template_machine = machine(name, namespace, version=version)
    machine_set = {
        "apiVersion": MACHINE_API,
        "kind": "MachineSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": "prod-eu-1", **(labels or {})},
        },
        "spec": {
            "clusterName": "prod-eu-1",
            "replicas": 3,
            "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": "md-0"}},
            "template": {
                "metadata": {"labels": {"cluster.x-k8s.io/deployment-name": "md-0"}},
                "spec": template_machine["spec"],
            },
        },
    }
    return {
        "machineSet": machine_set,
        "infrastructureMachineTemplate": _template(
            "DockerMachineTemplate", INFRA_API, name, namespace, docker_machine(image=image)["spec"]
        ),
        "bootstrapConfigTemplate": _template(
            "KubeadmConfigTemplate",
            BOOTSTRAP_API,
            name,
            namespace,
            kubeadm_config(files=files)["spec"],
        ),
    }


def request(hook: str, *, settings: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": capi.API_VERSION,
        "kind": f"{hook}Request",
        **copy.deepcopy(fields),
    }
    if settings:
        body["settings"] = settings
    return body


def can_update_machine(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    return request("CanUpdateMachine", current=current, desired=desired)


def can_update_machine_set(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    return request("CanUpdateMachineSet", current=current, desired=desired)


def update_machine(desired: dict[str, Any]) -> dict[str, Any]:
    return request("UpdateMachine", desired=desired)


def generate_upgrade_plan(
    from_cp: str,
    to: str,
    from_workers: str | None = None,
    cluster: dict[str, Any] | None = None,
) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "cluster": cluster if cluster is not None else capi.cluster_v1beta2(version=to),
        "fromControlPlaneKubernetesVersion": from_cp,
        "toKubernetesVersion": to,
    }
    if from_workers:
        fields["fromWorkersKubernetesVersion"] = from_workers
    return request("GenerateUpgradePlan", **fields)
