"""The Runtime SDK hook catalog: the nine lifecycle hooks, their wire fields, which block.

Everything else (routes, discovery, request parsing, response rendering) is built from
`HOOKS`. The facts come from Cluster API's `api/runtime/hooks/v1alpha1` package.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import NotRequired, TypedDict

GROUP = "hooks.runtime.cluster.x-k8s.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


class Moment(enum.Enum):
    """Which request fields identify one logical moment of a cluster's life."""

    NONE = "none"  #: create, initialized, delete: once per cluster
    TO_VERSION = "to"  #: BeforeClusterUpgrade: the target version
    FROM_TO = "from-to"  #: one step of a chained upgrade: from and to
    VERSION = "version"  #: After* upgrade hooks: the version reached


@dataclasses.dataclass(frozen=True)
class Hook:
    """One lifecycle hook of the catalog."""

    name: str
    #: Blocking hooks answer retryAfterSeconds; AfterControlPlaneInitialized has no such field.
    blocking: bool
    moment: Moment
    #: Version fields the request must carry, as strings.
    version_fields: tuple[str, ...] = ()
    #: The request may carry the upgrade plan (controlPlaneUpgrades, workersUpgrades).
    has_upgrade_plan: bool = False
    default_handler_name: str = ""

    @property
    def path_segment(self) -> str:
        """The hook's URL segment: its name lower-cased, as CAPI's GVHToPath builds it."""
        return self.name.lower()

    @property
    def request_kind(self) -> str:
        return f"{self.name}Request"

    @property
    def response_kind(self) -> str:
        return f"{self.name}Response"


def _kebab(name: str) -> str:
    return "".join("-" + c.lower() if c.isupper() else c for c in name).lstrip("-")


def _hook(
    name: str,
    *,
    blocking: bool = True,
    moment: Moment = Moment.NONE,
    version_fields: tuple[str, ...] = (),
    has_upgrade_plan: bool = False,
) -> Hook:
    return Hook(
        name=name,
        blocking=blocking,
        moment=moment,
        version_fields=version_fields,
        has_upgrade_plan=has_upgrade_plan,
        default_handler_name=_kebab(name),
    )


_FROM_TO = ("fromKubernetesVersion", "toKubernetesVersion")

HOOKS: dict[str, Hook] = {
    h.name: h
    for h in (
        _hook("BeforeClusterCreate"),
        _hook("AfterControlPlaneInitialized", blocking=False),
        _hook(
            "BeforeClusterUpgrade",
            moment=Moment.TO_VERSION,
            version_fields=_FROM_TO,
            has_upgrade_plan=True,
        ),
        _hook(
            "BeforeControlPlaneUpgrade",
            moment=Moment.FROM_TO,
            version_fields=_FROM_TO,
            has_upgrade_plan=True,
        ),
        _hook(
            "AfterControlPlaneUpgrade",
            moment=Moment.VERSION,
            version_fields=("kubernetesVersion",),
            has_upgrade_plan=True,
        ),
        _hook(
            "BeforeWorkersUpgrade",
            moment=Moment.FROM_TO,
            version_fields=_FROM_TO,
            has_upgrade_plan=True,
        ),
        _hook(
            "AfterWorkersUpgrade",
            moment=Moment.VERSION,
            version_fields=("kubernetesVersion",),
            has_upgrade_plan=True,
        ),
        _hook("AfterClusterUpgrade", moment=Moment.VERSION, version_fields=("kubernetesVersion",)),
        _hook("BeforeClusterDelete"),
    )
}

BY_PATH_SEGMENT: dict[str, Hook] = {h.path_segment: h for h in HOOKS.values()}

#: A moment hooksvc makes itself, not a hook CAPI calls (no endpoint, no discovery entry):
#: once a Cluster object is gone CAPI has nothing left to call (its Cluster controller
#: removes the Cluster's finalizer only after the Cluster's machines, control plane and
#: infrastructure are deleted: kubernetes-sigs/cluster-api
#: internal/controllers/cluster/cluster_controller.go, reconcileDelete). hooksvc's Cluster
#: watcher starts the runs of templates that name it, once per Cluster; they hold nothing.
CLUSTER_DELETED = Hook(name="ClusterDeleted", blocking=False, moment=Moment.NONE)
#: Every moment a workflow template may name: CAPI's hooks and hooksvc's own.
MOMENTS: dict[str, Hook] = {**HOOKS, CLUSTER_DELETED.name: CLUSTER_DELETED}

DISCOVERY_PATH_SEGMENT = "discovery"


class Status(enum.StrEnum):
    SUCCESS = "Success"
    FAILURE = "Failure"


class HookResponse(TypedDict):
    """A lifecycle hook's response body, in the wire's camelCase."""

    apiVersion: str
    kind: str
    status: str
    message: NotRequired[str]
    retryAfterSeconds: NotRequired[int]


#: retryAfterSeconds is an int32 on the wire.
MAX_RETRY_AFTER_SECONDS = 2**31 - 1


def response(hook: Hook, status: Status, message: str = "", retry_after: int = 0) -> HookResponse:
    """Build `hook`'s response; only blocking hooks carry retryAfterSeconds, always."""
    body: HookResponse = {"apiVersion": API_VERSION, "kind": hook.response_kind, "status": status}
    if message:
        body["message"] = message
    if hook.blocking:
        body["retryAfterSeconds"] = max(0, min(retry_after, MAX_RETRY_AFTER_SECONDS))
    return body
