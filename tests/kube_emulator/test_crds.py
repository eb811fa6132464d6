"""CustomResourceDefinitions created through the API, as apiextensions-apiserver serves them.

The paths are in kubernetes/kubernetes under staging/src/k8s.io/apiextensions-apiserver.
"""

from __future__ import annotations

import pytest
import urllib3
from kubernetes.client import ApiException

from tests.kube_emulator.conftest import Api, eventually
from tests.support.kube import KubeEmulator
from tests.support.kube_crds import definition

CRD = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
WIDGETS = ("example.com", "v1", "widgets")
#: The client takes the namespace before the plural.
IN_DEFAULT = ("example.com", "v1", "default", "widgets")


def widget(name: str, **meta: object) -> dict[str, object]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, **meta},
    }


def conditions(kube: KubeEmulator, name: str) -> dict[str, tuple[str, str]]:
    crd = kube.get_object(*CRD, None, name) or {}
    return {c["type"]: (c["status"], c["reason"]) for c in crd["status"]["conditions"]}


def discovered(kube: KubeEmulator, path: str) -> bool:
    status = urllib3.request("GET", f"{kube.url}{path}").status
    assert status in (200, 404)
    return status == 200


def test_a_new_crd_is_served_once_its_names_are_accepted_and_listed_once_established(
    kube: KubeEmulator, custom: Api
) -> None:
    """pkg/controller/status/naming_controller.go (NamesAccepted True NoConflicts,
    Established False Installing); pkg/apiserver/customresource_handler.go (requests
    answered once NamesAccepted or Established); pkg/controller/establish/
    establishing_controller.go (Established True InitialNamesAccepted);
    pkg/apiserver/customresource_discovery_controller.go (discovery only when Established)."""
    kube.set_crd_establish_delay(0.5)
    custom.create_cluster_custom_object(*CRD, definition("example.com", "Widget"))
    eventually(
        "names accepted",
        lambda: (
            conditions(kube, "widgets.example.com").get("NamesAccepted") == ("True", "NoConflicts")
        ),
    )
    assert conditions(kube, "widgets.example.com")["Established"] == ("False", "Installing")
    assert not discovered(kube, "/apis/example.com/v1")
    custom.create_namespaced_custom_object(*IN_DEFAULT, widget("early"))
    eventually("discovery", lambda: discovered(kube, "/apis/example.com/v1"))
    assert conditions(kube, "widgets.example.com")["Established"] == (
        "True",
        "InitialNamesAccepted",
    )
    found = custom.list_namespaced_custom_object(*IN_DEFAULT)["items"]
    assert [w["metadata"]["name"] for w in found] == ["early"]


def test_a_crd_whose_names_another_crd_holds_is_not_served(kube: KubeEmulator, custom: Api) -> None:
    """naming_controller.go: a plural already accepted for another CRD of the group is a
    PluralConflict; customresource_handler.go answers 404 for a CRD neither accepted nor
    established."""
    custom.create_cluster_custom_object(*CRD, definition("example.com", "Widget"))
    eventually("established", lambda: "Established" in conditions(kube, "widgets.example.com"))
    clash = definition("example.com", "Gadget", plural="widgets")
    clash["metadata"]["name"] = "clash.example.com"
    custom.create_cluster_custom_object(*CRD, clash)
    eventually(
        "the conflict",
        lambda: (
            conditions(kube, "clash.example.com").get("NamesAccepted")
            == ("False", "PluralConflict")
        ),
    )


def test_deleting_a_crd_deletes_its_resources_and_waits_for_their_finalizers(
    kube: KubeEmulator, custom: Api
) -> None:
    """pkg/registry/customresourcedefinition/etcd.go (Delete adds the
    customresourcecleanup finalizer, Terminating InstanceDeletionPending);
    pkg/controller/finalizer/crd_finalizer.go (every instance deleted, the finalizer dropped
    once none is left); customresource_handler.go (no create while terminating: 405)."""
    custom.create_cluster_custom_object(*CRD, definition("example.com", "Widget"))
    eventually("established", lambda: conditions(kube, "widgets.example.com").get(
        "Established") == ("True", "InitialNamesAccepted"))  # fmt: skip
    custom.create_namespaced_custom_object(
        *IN_DEFAULT, widget("held", finalizers=["example.com/cleanup"])
    )
    custom.create_namespaced_custom_object(*IN_DEFAULT, widget("plain"))
    custom.delete_cluster_custom_object(*CRD, "widgets.example.com")
    eventually("the plain one deleted", lambda: len(kube.list_objects(*WIDGETS)) == 1)
    crd = kube.get_object(*CRD, None, "widgets.example.com")
    assert crd is not None
    assert crd["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.k8s.io"]
    assert conditions(kube, "widgets.example.com")["Terminating"] == (
        "True",
        "InstanceDeletionInProgress",
    )
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(*IN_DEFAULT, widget("late"))
    assert refused.value.status == 405
    custom.patch_namespaced_custom_object(*IN_DEFAULT, "held", {"metadata": {"finalizers": None}})
    eventually("the CRD gone", lambda: kube.get_object(*CRD, None, "widgets.example.com") is None)
    with pytest.raises(ApiException) as unserved:
        custom.list_namespaced_custom_object(*IN_DEFAULT)
    assert unserved.value.status == 404


def test_while_a_crd_terminates_a_post_is_refused_but_an_apply_creates_and_is_deleted_again(
    kube: KubeEmulator, custom: Api
) -> None:
    """kubernetes v1.33 staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/
    customresource_handler.go `serveResource`: only the verb "create" (a POST) answers 405
    while the CRD is Terminating; a server-side apply is the verb "patch", and
    apiserver/pkg/endpoints/handlers/patch.go `patchResource` sets `forceAllowCreate` for an
    apply patch, so it creates the object. crd_finalizer.go `deleteInstances` lists and
    deletes every instance on each (requeued) sync, so what was made meanwhile goes too.
    customresource_discovery_controller.go `sync`: a terminating CRD's kind is listed
    without create, patch and update."""
    custom.create_cluster_custom_object(*CRD, definition("example.com", "Widget"))
    eventually("established", lambda: discovered(kube, "/apis/example.com/v1"))
    custom.create_namespaced_custom_object(
        *IN_DEFAULT, widget("held", finalizers=["example.com/cleanup"])
    )
    custom.delete_cluster_custom_object(*CRD, "widgets.example.com")
    eventually("terminating", lambda: conditions(kube, "widgets.example.com")["Terminating"] == (
        "True", "InstanceDeletionInProgress"))  # fmt: skip
    [resource] = urllib3.request("GET", f"{kube.url}/apis/example.com/v1").json()["resources"][:1]
    assert resource["verbs"] == ["delete", "deletecollection", "get", "list", "watch"]
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(*IN_DEFAULT, widget("posted"))
    assert refused.value.status == 405
    applied = urllib3.request(
        "PATCH",
        f"{kube.url}/apis/example.com/v1/namespaces/default/widgets/applied?fieldManager=t",
        body=b"apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: applied}\n",
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert applied.status == 201
    eventually("the applied one deleted by the finalizer", lambda: [
        w["metadata"]["name"] for w in kube.list_objects(*WIDGETS)] == ["held"])  # fmt: skip
