"""The Pod `eviction` subresource and PodDisruptionBudgets, as kube-apiserver serves them.

Written from kubernetes/kubernetes 01aa0f3f `pkg/registry/core/pod/storage/eviction.go`
(`EvictionREST.Create`, `canIgnorePDB`, `checkAndDecrement`, `getPodDisruptionBudgets`):

- an eviction is a create, so the NamespaceLifecycle admission plugin refuses it in a
  terminating namespace, before the Pod is looked at: 403 with cause NamespaceTerminating
  (kubernetes 04791b49 staging/src/k8s.io/apiserver/pkg/admission/plugin/namespace/
  lifecycle/admission.go `Admit`; cluster-api 8bb95107 drain.go `EvictPods` waits on it);
- a Pod that is Pending, has ended (Succeeded, Failed) or is being deleted is deleted at
  once, whatever its budgets (`canIgnorePDB`);
- otherwise the PodDisruptionBudgets of its namespace whose selector matches its labels (an
  empty selector matches nothing) decide: none, deleted; more than one, a 500 Status
  ("more than one PodDisruptionBudget"); one whose `status.observedGeneration` is behind
  its generation, a 429 (the budget "is still being processed"); one with
  `disruptionsAllowed` 0, a 429 TooManyRequests with a `DisruptionBudget` cause saying how
  many healthy pods it needs and has; else `disruptionsAllowed` goes down by one, the Pod
  is entered in `disruptedPods`, and the Pod is deleted (a Success Status, 201);
- a Pod that is not Ready while the budget has its desired healthy pods is deleted without
  spending the budget.

The disruption controller, which recomputes `disruptionsAllowed` from the Pods, is not
modelled: tests write the budget's status (`set_status`) as that controller would.
"""

from __future__ import annotations

import datetime

from tests.support import kube_lifecycle
from tests.support.kube_semantics import JSON, ApiError, label_selector_matches
from tests.support.kube_store import Store

PODS = ("", "v1", "pods")
PDBS = ("policy", "v1", "poddisruptionbudgets")
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."
#: policyv1.DisruptionBudgetCause
CAUSE = "DisruptionBudget"


def _too_many(message: str, cause: str, retry_after: int) -> ApiError:
    details: JSON = {"causes": [{"reason": CAUSE, "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return ApiError(429, message, details=details)


def selector_string(selector: JSON | None) -> str:
    """A LabelSelector ({matchLabels, matchExpressions}) as a selector string ("": empty)."""
    selector = selector or {}
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, op = expression["key"], expression["operator"]
        values = ",".join(expression.get("values") or [])
        terms.append(
            {
                "In": f"{key} in ({values})",
                "NotIn": f"{key} notin ({values})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }[op]
        )
    return ",".join(terms)


def _ready(pod: JSON) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _can_ignore_budget(pod: JSON) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(
        pod["metadata"].get("deletionTimestamp")
    )


def budgets(store: Store, pod: JSON) -> list[JSON]:
    """The PodDisruptionBudgets of the Pod's namespace that select it."""
    ns = pod["metadata"]["namespace"]
    labels = pod["metadata"].get("labels") or {}
    found = []
    for key, pdb in sorted(store.objects.items()):
        if key[:2] != (PDBS[0], PDBS[2]) or key[2] != ns:
            continue
        selector = selector_string((pdb.get("spec") or {}).get("selector"))
        if selector and label_selector_matches(selector, labels):
            found.append(pdb)
    return found


def evict(store: Store, ns: str, name: str, body: JSON) -> JSON:
    """POST pods/<name>/eviction: a Success Status once the Pod is deleted, or ApiError."""
    if (body.get("metadata") or {}).get("name") != name:
        raise ApiError(400, "name in URL does not match name in Eviction object")
    res = store.served(*PODS)
    store.admit_create(res, ns, name, "create")
    pod = store.existing(res, ns, name)
    if not _can_ignore_budget(pod):
        found = budgets(store, pod)
        if len(found) > 1:
            raise ApiError(
                500,
                "This pod has more than one PodDisruptionBudget, which the eviction"
                " subresource does not support.",
            )
        if found:
            _spend(store, found[0], pod)
    kube_lifecycle.delete(store, res, ns, name)
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}


def _spend(store: Store, pdb: JSON, pod: JSON) -> None:
    """checkAndDecrement, after the not-Ready shortcut; raises the 429s."""
    status = pdb.get("status") or {}
    current, desired = (
        int(status.get("currentHealthy") or 0),
        int(status.get("desiredHealthy") or 0),
    )
    if not _ready(pod) and current >= desired and desired > 0:
        return
    pdb_name = pdb["metadata"]["name"]
    if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 1):
        raise _too_many(
            VIOLATES,
            f"The disruption budget {pdb_name} is still being processed by the server.",
            10,
        )
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise ApiError(403, f'poddisruptionbudget.policy "{pdb_name}" is forbidden')
    if allowed == 0:
        raise _too_many(
            VIOLATES,
            f"The disruption budget {pdb_name} needs {desired} healthy pods and has"
            f" {current} currently",
            0,
        )
    disrupted = dict(status.get("disruptedPods") or {})
    disrupted[pod["metadata"]["name"]] = datetime.datetime.now(datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    store.set_status(
        PDBS,
        pdb["metadata"]["namespace"],
        pdb_name,
        {"disruptionsAllowed": allowed - 1, "disruptedPods": disrupted},
    )
