"""The resource controller against the Kubernetes API emulator serving hooksvc's CRDs.

Covers: a WorkflowTemplate resource applied becomes an active template (a hook call starts
its run) and says Accepted=True with its observedGeneration through the status
subresource; a bad spec says Accepted=False with apply_workflows' exact message and the
template in force stays as it was; deleting the resource deletes the template while runs
keep their snapshot; a watch that breaks resumes, and a compacted one lists again and
catches up on what changed meanwhile, deletions included; nothing is written when nothing
changed (no status write for the controller's own echo, a label, or a resync); a name held
by apply_workflows is refused on the status and accepted once freed; AddonProfile
resources generate their templates, wait for a dependency to exist, and go with their
resource.

Upstream behaviour relied on (read in kubernetes/kubernetes): a CRD's status subresource
ignores status on the main endpoint and takes only status on /status, and
metadata.generation counts spec changes only (apiextensions-apiserver
pkg/registry/customresource/strategy.go, PrepareForUpdate); a watch from a compacted
resourceVersion answers 410 Gone (the reflector lists again: client-go
tools/cache/reflector.go). The emulator models both (tests/support/kube_store.py).
"""

from __future__ import annotations

import io
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from tests.resources.conftest import Running, wait_for
from tests.support import capi
from tests.support.kube import KubeEmulator
from workflows.definitions import crds, spec
from workflows.kube import k8s
from workflows.models import AddonProfile, Run, WorkflowTemplate

pytestmark = pytest.mark.django_db(transaction=True)

STEPS: list[dict[str, Any]] = [
    {"name": "snapshot", "type": "wait", "with": {"seconds": 5}},
    {"name": "approve", "type": "approval", "dependsOn": ["snapshot"]},
]


def collection(kind: str) -> str:
    return f"/apis/{spec.GROUP}/{crds.VERSION}/{spec.PLURALS[kind]}"


def template(name: str, **body: Any) -> dict[str, Any]:
    return {
        "apiVersion": spec.RESOURCE_API_VERSION,
        "kind": "WorkflowTemplate",
        "metadata": {"name": name},
        "spec": {"hook": "BeforeClusterUpgrade", "steps": STEPS, **body},
    }


def profile(name: str, **body: Any) -> dict[str, Any]:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    return {
        "apiVersion": spec.RESOURCE_API_VERSION,
        "kind": "AddonProfile",
        "metadata": {"name": name},
        "spec": {"addons": {"manifests": [manifest]}, **body},
    }


def kubectl_apply(doc: dict[str, Any]) -> None:
    """Create the resource, or replace its spec and labels, as `kubectl apply` ends up doing."""
    api, path = k8s.management_api(), collection(doc["kind"])
    try:
        k8s.request(api, "POST", path, what="apply", body=doc, content_type="application/json")
    except k8s.Conflict:
        name = doc["metadata"]["name"]
        found = k8s.request(api, "GET", f"{path}/{name}", what="apply")
        found["spec"] = doc["spec"]
        found["metadata"]["labels"] = doc["metadata"].get("labels") or {}
        k8s.request(
            api, "PUT", f"{path}/{name}", what="apply", body=found, content_type="application/json"
        )


def kubectl_delete(kind: str, name: str) -> None:
    k8s.request(k8s.management_api(), "DELETE", f"{collection(kind)}/{name}", what="delete")


def live(kube: KubeEmulator, kind: str, name: str) -> dict[str, Any]:
    found = kube.get_object(spec.GROUP, crds.VERSION, spec.PLURALS[kind], None, name)
    assert found is not None
    return found


def accepted(kube: KubeEmulator, kind: str, name: str) -> dict[str, Any] | None:
    obj = kube.get_object(spec.GROUP, crds.VERSION, spec.PLURALS[kind], None, name) or {}
    status = obj.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition["type"] == "Accepted":
            if condition["observedGeneration"] != obj["metadata"]["generation"]:
                return None  # not about this generation yet
            return {**condition, "observedGeneration_status": status.get("observedGeneration")}
    return None


def settled(kube: KubeEmulator, kind: str, name: str, status: str) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(
        f"{kind} {name} Accepted={status}",
        lambda: (c := accepted(kube, kind, name)) and c["status"] == status and c,
    )
    return found


def lists(kube: KubeEmulator) -> int:
    path = collection("WorkflowTemplate")
    return sum(
        1 for m, p in kube.requests if m == "GET" and p.split("?")[0] == path and "watch=" not in p
    )


def status_writes(kube: KubeEmulator) -> int:
    return sum(
        1 for method, path in kube.requests if method == "PATCH" and path.endswith("/status")
    )


def upgrade(client: Client) -> dict[str, Any]:
    hook = "BeforeClusterUpgrade"
    response = client.post(
        capi.hook_path(hook), json.dumps(capi.hook_request(hook)), content_type="application/json"
    )
    answer: dict[str, Any] = response.json()
    return answer


def quiet(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the controllers logged at WARNING or above (a failed pass, a failed apply)."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_applied_resource_is_an_active_template_and_says_accepted(
    crd_kube: KubeEmulator, controllers: Running, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    kubectl_apply(template("backup", clusterSelector={"namespaces": ["fleet"]}))
    condition = settled(crd_kube, "WorkflowTemplate", "backup", "True")
    assert (condition["reason"], condition["message"]) == ("Applied", "hooksvc runs this spec")
    assert condition["observedGeneration"] == condition["observedGeneration_status"] == 1
    assert live(crd_kube, "WorkflowTemplate", "backup")["status"]["steps"] == 2
    stored = WorkflowTemplate.objects.get(name="backup")
    assert (stored.managed_by, stored.generation, stored.hook) == (
        "resource",
        1,
        "BeforeClusterUpgrade",
    )
    assert stored.spec == spec.workflow_template(
        template("backup", clusterSelector={"namespaces": ["fleet"]})["spec"], "backup"
    )
    # Active: a hook call starts its run and waits for it.
    answer = upgrade(client)
    assert answer["message"] == "workflow backup is starting"
    assert Run.objects.get().template_name == "backup"
    assert quiet(caplog) == [], "no pass failed, nothing was retried"
    # Written through the status subresource only.
    writes = [(m, p) for m, p in crd_kube.requests if m in ("PUT", "PATCH", "POST")]
    assert ("PATCH", f"{collection('WorkflowTemplate')}/backup/status") in writes
    assert all(p.endswith("/status") for m, p in writes if m == "PATCH")


def test_a_bad_spec_says_accepted_false_with_the_message_and_the_template_in_force_stays(
    crd_kube: KubeEmulator, controllers: Running
) -> None:
    kubectl_apply(template("backup"))
    settled(crd_kube, "WorkflowTemplate", "backup", "True")
    before = WorkflowTemplate.objects.values_list("spec", "generation", "updated_at").get()
    # Well typed (the CRD lets it through) but wrong: a dependency on a step that is not there.
    broken = [STEPS[0], {**STEPS[1], "dependsOn": ["snapshto"]}]
    kubectl_apply(template("backup", steps=broken))
    condition = settled(crd_kube, "WorkflowTemplate", "backup", "False")
    assert (condition["reason"], condition["message"]) == (
        "Invalid",
        "spec.steps[1].dependsOn: unknown step 'snapshto'",
    )
    assert condition["observedGeneration"] == 2
    assert WorkflowTemplate.objects.values_list("spec", "generation", "updated_at").get() == before
    # The message is apply_workflows' own for the same document.
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(json.dumps(template("backup", steps=broken)))
    assert str(caught.value) == f"document 1 (backup): {condition['message']}"
    kubectl_apply(template("backup", steps=STEPS, concurrency=2))
    fixed = settled(crd_kube, "WorkflowTemplate", "backup", "True")
    assert fixed["observedGeneration"] == 3
    assert WorkflowTemplate.objects.get().spec["concurrency"] == 2
    assert WorkflowTemplate.objects.get().generation == 2


def test_deleting_the_resource_deletes_its_template_and_runs_keep_their_snapshot(
    crd_kube: KubeEmulator, controllers: Running, client: Client
) -> None:
    kubectl_apply(template("backup"))
    settled(crd_kube, "WorkflowTemplate", "backup", "True")
    upgrade(client)
    run = Run.objects.get()
    kubectl_delete("WorkflowTemplate", "backup")
    wait_for("the template deleted", lambda: not WorkflowTemplate.objects.exists())
    run.refresh_from_db()
    assert (run.template_id, run.template_name, run.spec["steps"][0]["name"]) == (
        None,
        "backup",
        "snapshot",
    )


def test_a_broken_watch_resumes_and_a_compacted_one_lists_again_and_catches_up(
    crd_kube: KubeEmulator, controllers: Running
) -> None:
    for name in ("kept", "doomed"):
        kubectl_apply(template(name))
        settled(crd_kube, "WorkflowTemplate", name, "True")
    listed = lists(crd_kube)
    crd_kube.stop()
    time.sleep(1.5)  # the controllers meet a closed port and back off
    crd_kube.put_object(template("late"))
    crd_kube.start()
    settled(crd_kube, "WorkflowTemplate", "late", "True")
    assert lists(crd_kube) == listed, "resumed from its resourceVersion, without listing again"
    # Changes while away, and a watch history that no longer reaches back: 410 Gone.
    crd_kube.stop()
    crd_kube.delete_object(spec.GROUP, crds.VERSION, "workflowtemplates", None, "doomed")
    crd_kube.put_object(template("later"))
    crd_kube.compact()
    crd_kube.start()
    settled(crd_kube, "WorkflowTemplate", "later", "True")
    assert lists(crd_kube) > listed, "410 Gone: listed again"
    wait_for(
        "the deleted resource's template gone",
        lambda: (
            set(WorkflowTemplate.objects.values_list("name", flat=True))
            == {"kept", "late", "later"}
        ),
    )


def test_nothing_is_written_when_nothing_changed(
    crd_kube: KubeEmulator, controllers: Running
) -> None:
    kubectl_apply(template("backup"))
    settled(crd_kube, "WorkflowTemplate", "backup", "True")
    time.sleep(0.5)  # the echo of the controller's own status write
    writes = status_writes(crd_kube)
    stored = WorkflowTemplate.objects.values_list("generation", "updated_at").get()
    transition = accepted(crd_kube, "WorkflowTemplate", "backup")
    assert transition is not None
    kubectl_apply({**template("backup"), "metadata": {"name": "backup", "labels": {"a": "b"}}})
    time.sleep(3)  # the label's event, watch renewals and resyncs (every second here)
    assert status_writes(crd_kube) == writes
    assert WorkflowTemplate.objects.values_list("generation", "updated_at").get() == stored
    assert accepted(crd_kube, "WorkflowTemplate", "backup") == transition


def test_a_name_apply_workflows_holds_is_refused_until_it_is_freed(
    crd_kube: KubeEmulator, controllers: Running, tmp_path: Path
) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text(json.dumps({**template("backup"), "apiVersion": spec.API_VERSION}))
    call_command("apply_workflows", "-f", str(mine), stdout=io.StringIO())
    kubectl_apply(template("backup", concurrency=1))
    condition = settled(crd_kube, "WorkflowTemplate", "backup", "False")
    assert (condition["reason"], condition["message"]) == (
        "Conflict",
        "the WorkflowTemplate 'backup' was made with apply_workflows or the admin; "
        "delete one of them, or rename this resource",
    )
    assert WorkflowTemplate.objects.values_list("managed_by", "spec__concurrency").get() == (
        "",
        None,
    )
    WorkflowTemplate.objects.filter(name="backup").delete()  # e.g. in the admin
    settled(crd_kube, "WorkflowTemplate", "backup", "True")  # picked up by the next resync
    assert WorkflowTemplate.objects.values_list("managed_by", "spec__concurrency").get() == (
        "resource",
        1,
    )


def test_addon_profiles_generate_their_templates_wait_for_a_dependency_and_go_with_it(
    crd_kube: KubeEmulator, controllers: Running, caplog: pytest.LogCaptureFixture
) -> None:
    kubectl_apply(profile("ingress", dependsOn=["cert-manager"]))
    condition = settled(crd_kube, "AddonProfile", "ingress", "False")
    assert (
        condition["message"]
        == "AddonProfile 'ingress': spec.dependsOn: unknown AddonProfile 'cert-manager'"
    )
    assert not AddonProfile.objects.exists()
    kubectl_apply(profile("cert-manager"))
    settled(crd_kube, "AddonProfile", "cert-manager", "True")
    settled(crd_kube, "AddonProfile", "ingress", "True")
    assert live(crd_kube, "AddonProfile", "ingress")["status"]["templates"] == [
        "addon-install-ingress",
        "addon-remove-ingress",
    ]
    install = WorkflowTemplate.objects.get(name="addon-install-ingress")
    assert (install.managed_by, install.spec["waitFor"]) == (
        "addonprofile:ingress",
        ["addon-install-cert-manager"],
    )
    assert dict(AddonProfile.objects.values_list("name", "managed_by")) == {
        "cert-manager": "resource",
        "ingress": "resource",
    }
    kubectl_delete("AddonProfile", "ingress")
    wait_for(
        "the profile and its templates gone",
        lambda: (
            set(WorkflowTemplate.objects.values_list("name", flat=True))
            == {"addon-install-cert-manager", "addon-remove-cert-manager"}
        ),
    )
    assert quiet(caplog) == []
