"""The Runtime SDK hook catalog: the nine lifecycle hooks, their wire fields, which block,
and CAPI 1.12's in-place update and upgrade-plan hooks, served when an operator turns them on.

Everything else (routes, discovery, request parsing, response rendering) is built from
`HOOKS` and `OPTIONAL_HOOKS`. The facts come from Cluster API's `api/runtime/hooks/v1alpha1`
package (lifecyclehooks_types.go, inplaceupdate_types.go, upgrade_plan_types.go).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
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
    #: UpdateMachine: the Machine and a digest of its desired spec (the request has no UID).
    MACHINE_SPEC = "machine-spec"


#: The lifecycle hooks: always served.
LIFECYCLE = "Lifecycle"
#: CanUpdateMachine, CanUpdateMachineSet, UpdateMachine: named after CAPI's feature gate.
IN_PLACE_UPDATES = "InPlaceUpdates"
#: GenerateUpgradePlan.
UPGRADE_PLAN = "UpgradePlan"
#: The families an operator may turn on (HOOKSVC_OPTIONAL_HOOKS).
OPTIONAL_FAMILIES = (IN_PLACE_UPDATES, UPGRADE_PLAN)


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
    #: LIFECYCLE, or the optional family that serves it.
    family: str = LIFECYCLE

    @property
    def optional(self) -> bool:
        return self.family != LIFECYCLE

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
    family: str = LIFECYCLE,
) -> Hook:
    return Hook(
        name=name,
        blocking=blocking,
        moment=moment,
        version_fields=version_fields,
        has_upgrade_plan=has_upgrade_plan,
        default_handler_name=_kebab(name),
        family=family,
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

#: Served only when HOOKSVC_OPTIONAL_HOOKS names their family: CAPI lets one extension
#: register for the in-place hooks (core/reconcilers/machine/machine_controller_inplace_update.go
#: refuses several UpdateMachine handlers), so serving them must be the operator's choice.
#: CanUpdate* and GenerateUpgradePlan answer a CommonResponse (no retryAfterSeconds);
#: UpdateMachine a CommonRetryResponse: Success + retryAfterSeconds > 0 is "in progress".
OPTIONAL_HOOKS: dict[str, Hook] = {
    h.name: h
    for h in (
        _hook("CanUpdateMachine", blocking=False, family=IN_PLACE_UPDATES),
        _hook("CanUpdateMachineSet", blocking=False, family=IN_PLACE_UPDATES),
        _hook("UpdateMachine", moment=Moment.MACHINE_SPEC, family=IN_PLACE_UPDATES),
        _hook("GenerateUpgradePlan", blocking=False, family=UPGRADE_PLAN),
    )
}
#: Every hook hooksvc knows, served or not.
ALL_HOOKS: dict[str, Hook] = {**HOOKS, **OPTIONAL_HOOKS}

BY_PATH_SEGMENT: dict[str, Hook] = {h.path_segment: h for h in ALL_HOOKS.values()}

#: A moment hooksvc makes itself, not a hook CAPI calls (no endpoint, no discovery entry):
#: once a Cluster object is gone CAPI has nothing left to call (its Cluster controller
#: removes the Cluster's finalizer only after the Cluster's machines, control plane and
#: infrastructure are deleted: kubernetes-sigs/cluster-api
#: internal/controllers/cluster/cluster_controller.go, reconcileDelete). hooksvc's Cluster
#: watcher starts the runs of templates that name it, once per Cluster; they hold nothing.
CLUSTER_DELETED = Hook(name="ClusterDeleted", blocking=False, moment=Moment.NONE)
#: Every moment a workflow template may name: CAPI's hooks and hooksvc's own.
#: UpdateMachine is a moment too: a workflow per requested update of a Machine.
MOMENTS: dict[str, Hook] = {
    **HOOKS,
    CLUSTER_DELETED.name: CLUSTER_DELETED,
    "UpdateMachine": OPTIONAL_HOOKS["UpdateMachine"],
}

#: The hooks a break-glass bypass may answer: those whose calls start runs that hold CAPI
#: (the lifecycle hooks, and UpdateMachine: a Machine's in-place update).
BYPASSABLE: dict[str, Hook] = {**HOOKS, "UpdateMachine": OPTIONAL_HOOKS["UpdateMachine"]}

DISCOVERY_PATH_SEGMENT = "discovery"


class Status(enum.StrEnum):
    SUCCESS = "Success"
    FAILURE = "Failure"


class PatchBody(TypedDict):
    """CAPI's hooks.Patch: `patch` is a Go []byte, so base64 text on the wire."""

    patchType: str
    patch: str


class UpgradeStep(TypedDict):
    version: str


class HookResponse(TypedDict):
    """A hook's response body, in the wire's camelCase."""

    apiVersion: str
    kind: str
    status: str
    message: NotRequired[str]
    retryAfterSeconds: NotRequired[int]
    # CanUpdateMachine
    machinePatch: NotRequired[PatchBody]
    infrastructureMachinePatch: NotRequired[PatchBody]
    bootstrapConfigPatch: NotRequired[PatchBody]
    # CanUpdateMachineSet
    machineSetPatch: NotRequired[PatchBody]
    infrastructureMachineTemplatePatch: NotRequired[PatchBody]
    bootstrapConfigTemplatePatch: NotRequired[PatchBody]
    # GenerateUpgradePlan
    controlPlaneUpgrades: NotRequired[list[UpgradeStep]]
    workersUpgrades: NotRequired[list[UpgradeStep]]


#: retryAfterSeconds is an int32 on the wire.
MAX_RETRY_AFTER_SECONDS = 2**31 - 1


def response(
    hook: Hook,
    status: Status,
    message: str = "",
    retry_after: int = 0,
    fields: Mapping[str, object] | None = None,
) -> HookResponse:
    """Build `hook`'s response; only blocking hooks carry retryAfterSeconds, always.

    `fields` are the hook's own (patches, upgrade steps), carried only by a Success.
    """
    body: HookResponse = {"apiVersion": API_VERSION, "kind": hook.response_kind, "status": status}
    if message:
        body["message"] = message
    if hook.blocking:
        body["retryAfterSeconds"] = max(0, min(retry_after, MAX_RETRY_AFTER_SECONDS))
    if fields and status == Status.SUCCESS:
        body.update(fields)  # type: ignore[typeddict-item]
    return body
