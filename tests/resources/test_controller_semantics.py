"""The resource controller against API server semantics its first version did not follow.

Covers: a status written from an out-of-date copy of the resource (events arrive late; a
merge patch replaces `conditions` whole) does not drop the conditions another writer added
meanwhile: the write carries the resourceVersion it was computed from, a 409 reads the
resource again; a resource whose deletion has begun (a finalizer holds it) is no longer
run, at its MODIFIED event and on a list alike.

Upstream: optimistic concurrency on update, a stale resourceVersion is 409 Conflict
(kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go
`Update`, storage `GuaranteedUpdate` precondition; merge patches are applied to the stored
object before the check: endpoints/handlers/patch.go); a DELETE of an object with
finalizers sets metadata.deletionTimestamp and keeps it until they are removed (store.go
`Delete`, `updateForGracefulDeletionAndFinalizers`). The emulator models both
(tests/support/kube_store.py `_check_version`, kube_lifecycle.py `delete`).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.resources.conftest import Running, wait_for
from tests.resources.test_controller import (
    collection,
    kubectl_apply,
    kubectl_delete,
    live,
    settled,
    template,
)
from tests.support.kube import KubeEmulator
from workflows.controllers import resources
from workflows.kube import k8s
from workflows.models import WorkflowTemplate

pytestmark = pytest.mark.django_db(transaction=True)
JSON = "application/json"


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def test_a_status_written_from_an_out_of_date_copy_keeps_another_writers_condition(
    crd_kube: KubeEmulator,
) -> None:
    kubectl_apply(template("gate"))
    controller = resources.Resources("WorkflowTemplate", stop=threading.Event(), timeout_seconds=1)
    controller.once()  # lists, applies, writes Accepted=True
    assert conditions(live(crd_kube, "WorkflowTemplate", "gate"))["Accepted"]["status"] == "True"
    # The spec changes (generation 2): the event the controller will handle carries this copy.
    kubectl_apply(template("gate", hook="NotAHook"))
    api, path = k8s.management_api(), f"{collection('WorkflowTemplate')}/gate"
    late_copy = k8s.request(api, "GET", path, what="read")
    # Then another controller adds its own condition, as controllers do: read, then update.
    current = k8s.request(api, "GET", path, what="read")
    current["status"]["conditions"].append(
        {
            "type": "Reviewed",
            "status": "True",
            "reason": "Approved",
            "message": "reviewed by the platform team",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    )
    k8s.request(api, "PUT", f"{path}/status", what="review", body=current, content_type=JSON)
    controller.changed("MODIFIED", late_copy)
    shown = conditions(live(crd_kube, "WorkflowTemplate", "gate"))
    assert shown["Accepted"]["status"] == "False" and shown["Accepted"]["observedGeneration"] == 2
    assert "Reviewed" in shown, "the other writer's condition was overwritten"


@pytest.mark.parametrize("when", ["watching", "listing"])
def test_a_resource_whose_deletion_has_begun_is_no_longer_run(
    crd_kube: KubeEmulator, when: str
) -> None:
    held = template("gate")
    held["metadata"]["finalizers"] = ["example.com/keep-a-record"]
    kubectl_apply(held)
    controllers = Running()
    controllers.start()
    try:
        settled(crd_kube, "WorkflowTemplate", "gate", "True")
        assert WorkflowTemplate.objects.filter(name="gate").exists()
        if when == "listing":
            controllers.close(crd_kube)
        kubectl_delete("WorkflowTemplate", "gate")
        held_back = live(crd_kube, "WorkflowTemplate", "gate")
        assert held_back["metadata"]["deletionTimestamp"], "the finalizer holds it, deleted"
        if when == "listing":
            controllers = Running()
            controllers.start()
        wait_for(
            "the template to go", lambda: not WorkflowTemplate.objects.filter(name="gate").exists()
        )
        # The finalizer's owner lets it go: the DELETED event finds nothing left to do.
        api, path = k8s.management_api(), f"{collection('WorkflowTemplate')}/gate"
        patch = {"metadata": {"finalizers": None}}
        k8s.request(
            api,
            "PATCH",
            path,
            what="release",
            body=patch,
            content_type="application/merge-patch+json",
        )
        wait_for(
            "the resource to go",
            lambda: (
                crd_kube.get_object(
                    "hooks.hooksvc.io", "v1alpha1", "workflowtemplates", None, "gate"
                )
                is None
            ),
        )
        assert not WorkflowTemplate.objects.filter(name="gate").exists()
        assert controllers.loops["WorkflowTemplate"].healthy()
    finally:
        controllers.close(crd_kube)
