"""Least privilege, object by object: pod and container security, resources, RBAC.

The namespace enforces the restricted Pod Security Standard, so every container in every
overlay (the dev overlay's PostgreSQL and Redis too), every value set of the Helm chart and
clusterctl's components must meet it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy import manifests

#: The whole of hooksvc's cluster-wide permissions: (API group, resource) -> verbs.
EXPECTED_CLUSTER_RULES = {
    ("cluster.x-k8s.io", "clusters"): {"get", "list", "watch"},
    # The node steps read the Node of a Machine under an in-place update (status.nodeRef).
    ("cluster.x-k8s.io", "machines"): {"get"},
    ("", "secrets"): {"get", "list", "watch"},
    ("", "events"): {"get", "create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
    # The resource controller: hooksvc's custom resources (read again on a 409), and only the
    # status it writes.
    ("hooks.hooksvc.io", "workflowtemplates"): {"get", "list", "watch"},
    ("hooks.hooksvc.io", "addonprofiles"): {"get", "list", "watch"},
    ("hooks.hooksvc.io", "workflowtemplates/status"): {"patch"},
    ("hooks.hooksvc.io", "addonprofiles/status"): {"patch"},
    ("hooks.hooksvc.io", "inplacepolicies"): {"get", "list", "watch"},
    ("hooks.hooksvc.io", "upgradepolicies"): {"get", "list", "watch"},
    ("hooks.hooksvc.io", "inplacepolicies/status"): {"patch"},
    ("hooks.hooksvc.io", "upgradepolicies/status"): {"patch"},
}
#: The watcher's leader Lease, in hooksvc's namespace: create it, then get and update it only.
EXPECTED_LEASE_RULES = {
    ("coordination.k8s.io", "leases", ""): {"create"},
    ("coordination.k8s.io", "leases", "hooksvc-watcher"): {"get", "update"},
}
RBAC_KINDS = ("ClusterRole", "Role")
#: The one writable path of a hooksvc container (a mount path in the pod, not a file here).
TMP = "/tmp"  # noqa: S108


def _rule_set(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def _named_rule_set(rules: list[dict[str, Any]]) -> dict[tuple[str, str, str], set[str]]:
    """Like `_rule_set`, keyed by resource name too ("" for a rule without resourceNames)."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "resourceNames", "verbs"}, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for name in rule.get("resourceNames") or [""]:
                    out.setdefault((group, resource, name), set()).update(rule["verbs"])
    return out


def wildcards(rules: list[dict[str, Any]]) -> list[str]:
    """Every `*` in any field of any rule, as `field: value`."""
    found = []
    for rule in rules:
        for field, values in rule.items():
            found += [f"{field}: {v}" for v in values if "*" in v]
    return found


def test_every_pod_and_container_runs_restricted(
    every_rendering: dict[str, list[manifests.Obj]],
) -> None:
    for name, workload in manifests.every_workload(every_rendering):
        where = f"{name}: {manifests.id_of(workload)}"
        pod = manifests.pod_spec(workload)["securityContext"]
        assert pod["runAsNonRoot"] is True, where
        assert pod["runAsUser"] > 0, where
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, where
        for container in manifests.containers(workload):
            ctx = container["securityContext"]
            at = f"{where} container {container['name']}"
            assert ctx["runAsNonRoot"] is True, at
            assert ctx["readOnlyRootFilesystem"] is True, at
            assert ctx["allowPrivilegeEscalation"] is False, at
            assert ctx["capabilities"] == {"drop": ["ALL"]}, at
            assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}, at
            assert not ctx.get("privileged"), at


def test_every_container_has_cpu_and_memory_requests_and_limits(
    every_rendering: dict[str, list[manifests.Obj]],
) -> None:
    for name, workload in manifests.every_workload(every_rendering):
        for container in manifests.containers(workload):
            at = f"{name}: {manifests.id_of(workload)} container {container['name']}"
            resources = container["resources"]
            assert set(resources["requests"]) == {"cpu", "memory"}, at
            assert set(resources["limits"]) == {"cpu", "memory"}, at


def test_hooksvc_containers_write_only_to_an_emptydir_tmp(
    every_rendering: dict[str, list[manifests.Obj]],
) -> None:
    for name, workload in manifests.every_workload(every_rendering):
        if not manifests.is_hooksvc(workload):
            continue
        volumes = {v["name"]: v for v in manifests.pod_spec(workload)["volumes"]}
        for container in manifests.containers(workload):
            at = f"{name}: {manifests.id_of(workload)} container {container['name']}"
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert "emptyDir" in volumes[mounts[TMP]], at
            for path, volume in mounts.items():
                assert path == TMP or "emptyDir" not in volumes[volume], at


def test_only_the_worker_and_the_watcher_get_a_service_account_token(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    tokens: dict[str, set[str]] = {}
    for name, workload in manifests.every_workload(rendered):
        spec = manifests.pod_spec(workload)
        at = f"{name}: {manifests.id_of(workload)}"
        if spec.get("automountServiceAccountToken", True):
            tokens.setdefault(name, set()).add(manifests.component(workload))
        if manifests.is_hooksvc(workload):
            assert spec["serviceAccountName"] == "hooksvc", at
    assert tokens == {name: {"worker", "watcher"} for name in rendered}


def test_the_cluster_role_grants_exactly_the_listed_rules(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    for name, objects in rendered.items():
        roles = [o for o in objects if o["kind"] in RBAC_KINDS]
        assert sorted(manifests.id_of(r) for r in roles) == [
            "ClusterRole/hooksvc",
            "Role/hooksvc-watcher-lease",
        ], name
        cluster_role = manifests.find(objects, "ClusterRole", "hooksvc")
        assert _rule_set(cluster_role["rules"]) == EXPECTED_CLUSTER_RULES, name
        binding = manifests.find(objects, "ClusterRoleBinding", "hooksvc")
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "hooksvc",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "hooksvc", "namespace": "hooksvc-system"}
        ]


def test_the_watcher_may_hold_its_leader_lease_and_nothing_else_in_its_namespace(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    """client-go's leaselock creates the Lease, then gets and updates it
    (tools/leaderelection/resourcelock/leaselock.go Get, Create, Update)."""
    for name, objects in rendered.items():
        role = manifests.find(objects, "Role", "hooksvc-watcher-lease")
        assert role["metadata"]["namespace"] == "hooksvc-system", name
        assert _named_rule_set(role["rules"]) == EXPECTED_LEASE_RULES, name
        binding = manifests.find(objects, "RoleBinding", "hooksvc-watcher-lease")
        assert binding["metadata"]["namespace"] == "hooksvc-system", name
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "hooksvc-watcher-lease",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "hooksvc", "namespace": "hooksvc-system"}
        ]


def test_no_rule_anywhere_has_a_wildcard(
    every_rendering: dict[str, list[manifests.Obj]], tmp_path: Path
) -> None:
    targets = {
        **every_rendering,
        "namespaced-secrets": _namespaced(tmp_path / "namespaced"),
        "management-steps": _component("management-steps", tmp_path / "management"),
    }
    for name, objects in targets.items():
        roles = [o for o in objects if o["kind"] in RBAC_KINDS]
        assert len(roles) >= 2, f"{name}: its ClusterRole and the watcher's Role at least"
        for role in roles:
            assert not wildcards(role["rules"]), f"{name}: {manifests.id_of(role)}"


@pytest.mark.parametrize(
    "rule",
    [
        {"apiGroups": ["*"], "resources": ["clusters"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["*"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["secrets/*"], "verbs": ["get"]},
    ],
)
def test_the_wildcard_check_finds_a_star_in_any_field(rule: dict[str, Any]) -> None:
    assert wildcards([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, rule])


def _component(name: str, tmp_path: Path) -> list[manifests.Obj]:
    if manifests.kubectl() is None:
        pytest.skip("kubectl is not installed (docs/deploy.md)")
    tmp_path.mkdir(exist_ok=True)
    return manifests.render_with_component(name, tmp_path)


def _namespaced(tmp_path: Path) -> list[manifests.Obj]:
    return _component("namespaced-secrets", tmp_path)


def test_the_namespaced_component_moves_secrets_to_a_role(tmp_path: Path) -> None:
    objects = _namespaced(tmp_path)
    cluster_rules = _rule_set(manifests.find(objects, "ClusterRole", "hooksvc")["rules"])
    expected = dict(EXPECTED_CLUSTER_RULES)
    del expected[("", "secrets")]
    assert cluster_rules == expected
    role = manifests.find(objects, "Role", "hooksvc-secrets")
    assert _rule_set(role["rules"]) == {("", "secrets"): {"get", "list", "watch"}}
    binding = manifests.find(objects, "RoleBinding", "hooksvc-secrets")
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]
    assert binding["roleRef"]["name"] == "hooksvc-secrets"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "hooksvc", "namespace": "hooksvc-system"}
    ]


def test_the_management_steps_component_grants_configmaps_and_jobs_in_one_namespace(
    tmp_path: Path,
) -> None:
    objects = _component("management-steps", tmp_path)
    cluster_rules = _rule_set(manifests.find(objects, "ClusterRole", "hooksvc")["rules"])
    assert cluster_rules == EXPECTED_CLUSTER_RULES, "the cluster-wide grant is unchanged"
    roles = [o for o in objects if o["kind"] in RBAC_KINDS]
    assert sorted(manifests.id_of(r) for r in roles) == [
        "ClusterRole/hooksvc",
        "Role/hooksvc-management-steps",
        "Role/hooksvc-watcher-lease",
    ]
    role = manifests.find(objects, "Role", "hooksvc-management-steps")
    assert role["metadata"]["namespace"] == "hooksvc-system"
    # addon_install's configMapRef; k8s_job's Job, its pods, their logs and the Job's
    # FailedCreate Events (cluster: management).
    assert _rule_set(role["rules"]) == {
        ("", "configmaps"): {"get"},
        ("batch", "jobs"): {"create", "get", "delete"},
        ("", "pods"): {"get", "list"},
        ("", "pods/log"): {"get"},
        ("", "events"): {"list"},
    }
    binding = manifests.find(objects, "RoleBinding", "hooksvc-management-steps")
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "hooksvc-management-steps",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "hooksvc", "namespace": "hooksvc-system"}
    ]
