"""Admission plugins that refuse a Pod, and the controller behind one of them, for the emulator.

Switched on by `kube_workloads.start` with the workload controllers, since a Pod they
refuse is what a Job controller or a step then has to cope with. Each follows its
upstream source (kubernetes v1.33):

- `ServiceAccounts`: the ServiceAccount admission plugin
  (plugin/pkg/admission/serviceaccount/admission.go, `Admit`, `getServiceAccount`) gives a
  Pod without `serviceAccountName` the `default` one and refuses a Pod whose ServiceAccount
  does not exist: 403, `pods "<name>" is forbidden: error looking up service account
  <ns>/<sa>: serviceaccount "<sa>" not found` (the name is the generateName while none is
  generated, apiserver pkg/admission/errors.go). Token mounting is not modelled. As
  kube-controller-manager's serviceaccounts controller
  (pkg/controller/serviceaccount/serviceaccounts_controller.go, `syncNamespace`) it also
  makes the `default` ServiceAccount of every namespace.
- `ResourceQuotas`: the ResourceQuota admission plugin's check of the `pods` count
  (apiserver pkg/admission/plugin/resourcequota/controller.go, `checkRequest`): a Pod
  past a quota's `hard.pods` (or `count/pods`) is refused with 403 `exceeded quota: <quota>,
  requested: pods=1, used: pods=<n>, limited: pods=<hard>`. Usage is counted from the
  store (Pods not Succeeded or Failed, pkg/quota/v1/evaluator/core/pods.go `QuotaV1Pod`),
  where kube-apiserver reads the quota's status that the resource quota controller keeps:
  the same figure once that controller has synced. Other resources are not counted.
"""

from __future__ import annotations

from tests.support.kube_resources import Resource
from tests.support.kube_semantics import JSON, ApiError
from tests.support.kube_store import Change, Store

SERVICE_ACCOUNTS = ("", "v1", "serviceaccounts")
#: ResourceQuota is no built-in of the emulator: `kube_workloads.start` declares it.
QUOTAS = ("", "v1", "resourcequotas", "ResourceQuota")
DEFAULT_SERVICE_ACCOUNT = "default"


def _forbidden(res: Resource, shown: str, why: str) -> ApiError:
    return ApiError(
        403,
        f'{res.qualified} "{shown}" is forbidden: {why}',
        details={"name": shown, "group": res.group, "kind": res.plural},
    )


def _is_pod(res: Resource) -> bool:
    return (res.group, res.plural) == ("", "pods")


class ServiceAccounts:
    """The `default` ServiceAccount of each namespace, and Pods refused without theirs."""

    def start(self, store: Store) -> None:
        for key in [k for k in store.objects if k[:2] == ("", "namespaces")]:
            self._ensure_default(store, key[3])

    def react(self, store: Store, change: Change) -> None:
        if (change.group, change.plural) == ("", "namespaces") and change.type != "DELETED":
            self._ensure_default(store, change.new["metadata"]["name"])

    @staticmethod
    def _ensure_default(store: Store, namespace: str) -> None:
        found = store.objects.get(("", "namespaces", "", namespace))
        if found is None or (found.get("metadata") or {}).get("deletionTimestamp"):
            return
        if ("", "serviceaccounts", namespace, DEFAULT_SERVICE_ACCOUNT) in store.objects:
            return
        account = {"metadata": {"name": DEFAULT_SERVICE_ACCOUNT}}
        store.create(store.served(*SERVICE_ACCOUNTS), namespace, account)

    def admit(self, store: Store, res: Resource, namespace: str, obj: JSON, shown: str) -> None:
        if not _is_pod(res):
            return
        spec = obj.setdefault("spec", {})
        name = spec.get("serviceAccountName") or DEFAULT_SERVICE_ACCOUNT
        spec["serviceAccountName"] = name
        if ("", "serviceaccounts", namespace, name) not in store.objects:
            raise _forbidden(
                res,
                shown,
                f"error looking up service account {namespace}/{name}: "
                f'serviceaccount "{name}" not found',
            )


class ResourceQuotas:
    """Refuses a Pod that would take a namespace past a ResourceQuota's `pods`."""

    def react(self, store: Store, change: Change) -> None:
        pass

    def admit(self, store: Store, res: Resource, namespace: str, obj: JSON, shown: str) -> None:
        if not _is_pod(res):
            return
        quotas = [
            quota
            for key, quota in sorted(store.objects.items())
            if key[:3] == ("", "resourcequotas", namespace)
        ]
        used = sum(
            1
            for key, pod in store.objects.items()
            if key[:3] == ("", "pods", namespace)
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )
        for quota in quotas:
            hard = (quota.get("spec") or {}).get("hard") or {}
            for resource in ("count/pods", "pods"):
                if resource in hard and used + 1 > int(hard[resource]):
                    raise _forbidden(
                        res,
                        shown,
                        f"exceeded quota: {quota['metadata']['name']}, requested: "
                        f"{resource}=1, used: {resource}={used}, limited: "
                        f"{resource}={hard[resource]}",
                    )
