"""Parses the requests of the optional hooks: CanUpdateMachine, CanUpdateMachineSet,
UpdateMachine (family InPlaceUpdates) and GenerateUpgradePlan (UpgradePlan).

The shapes are Cluster API's api/runtime/hooks/v1alpha1 inplaceupdate_types.go and
upgrade_plan_types.go. CAPI sends objects with name, namespace, labels, annotations and
spec only, never a UID or status (core/reconcilers/machine/machine_controller_inplace_update.go
cleanupMachine, cleanupUnstructured): a Machine's update is known by its name and a digest
of the desired specs. Rejections are `wire.BadRequest`, fixed words naming the field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from hooksvc.contract import catalog, semver, wire

_CLUSTER_GROUP = "cluster.x-k8s.io"
#: The label CAPI puts on every object of a Cluster (api/core/v1beta2 ClusterNameLabel).
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
#: Length of the desired-spec digest in moments (hex characters of a SHA-256).
DIGEST_LENGTH = 16


@dataclasses.dataclass(frozen=True)
class KubeObject:
    """One object of a request: what hooksvc reads of it, and all of it for patches."""

    api_version: str
    kind: str
    name: str
    namespace: str
    labels: dict[str, str]
    raw: dict[str, Any]

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.raw.get("spec") or {}
        return spec


@dataclasses.dataclass(frozen=True)
class Objects:
    """A Machine (or MachineSet) and its infrastructure and bootstrap objects (or templates)."""

    owner: KubeObject
    infrastructure: KubeObject
    bootstrap: KubeObject | None

    @property
    def cluster_name(self) -> str:
        """The Cluster the objects belong to: spec.clusterName, else CAPI's label."""
        name = self.owner.spec.get("clusterName")
        if isinstance(name, str) and name:
            return name[: wire.MAX_NAME]
        return self.owner.labels.get(CLUSTER_NAME_LABEL, "")[: wire.MAX_NAME]


@dataclasses.dataclass(frozen=True)
class CanUpdateCall:
    """CanUpdateMachine (owner: a Machine) or CanUpdateMachineSet (owner: a MachineSet)."""

    hook: catalog.Hook
    settings: dict[str, str]
    current: Objects
    desired: Objects


@dataclasses.dataclass(frozen=True)
class UpdateMachineCall:
    hook: catalog.Hook
    settings: dict[str, str]
    desired: Objects

    @property
    def digest(self) -> str:
        """The desired specs, hashed: a new desired spec is a new update."""
        return spec_digest(self.desired)


@dataclasses.dataclass(frozen=True)
class UpgradePlanCall:
    hook: catalog.Hook
    settings: dict[str, str]
    cluster: wire.Cluster
    from_control_plane: semver.Version
    #: None: CAPI sent none (no MachineDeployments or MachinePools with a version).
    from_workers: semver.Version | None
    to: semver.Version
    #: The versions as sent, for messages and answers.
    from_control_plane_text: str
    from_workers_text: str
    to_text: str


OptionalCall = CanUpdateCall | UpdateMachineCall | UpgradePlanCall

#: Per hook: the request's object keys (owner, infrastructure, bootstrap) and owner kind.
_OBJECT_KEYS: dict[str, tuple[str, str, str, str]] = {
    "CanUpdateMachine": ("machine", "infrastructureMachine", "bootstrapConfig", "Machine"),
    "UpdateMachine": ("machine", "infrastructureMachine", "bootstrapConfig", "Machine"),
    "CanUpdateMachineSet": (
        "machineSet",
        "infrastructureMachineTemplate",
        "bootstrapConfigTemplate",
        "MachineSet",
    ),
}


def spec_digest(objects: Objects) -> str:
    """A digest of the owner's, infrastructure's and bootstrap's specs (canonical JSON)."""
    specs = {
        "owner": objects.owner.spec,
        "infrastructure": objects.infrastructure.spec,
        "bootstrap": objects.bootstrap.spec if objects.bootstrap else None,
    }
    text = json.dumps(specs, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_LENGTH]


def _object(value: object, where: str, *, kind: str = "", group: str = "") -> KubeObject:
    if value is None:
        raise wire.BadRequest(f"{where} is required")
    if not isinstance(value, dict):
        raise wire.BadRequest(f"{where} must be an object")
    prefix = f"{where}."
    api_version = wire.field(value, "apiVersion", str, prefix)
    if group and api_version and api_version.split("/")[0] != group:
        raise wire.BadRequest(f"{where}.apiVersion must be in group {group}")
    given_kind = wire.field(value, "kind", str, prefix)
    if kind and given_kind and given_kind != kind:
        raise wire.BadRequest(f"{where}.kind must be {kind!r}, got {wire.excerpt(given_kind)}")
    meta = wire.field(value, "metadata", dict, prefix, required=True)
    wire.field(value, "spec", dict, prefix)
    return KubeObject(
        api_version=api_version,
        kind=given_kind or kind,
        name=wire.field(
            meta, "name", str, f"{where}.metadata.", required=True, max_length=wire.MAX_NAME
        ),
        namespace=wire.field(
            meta,
            "namespace",
            str,
            f"{where}.metadata.",
            required=True,
            max_length=wire.MAX_NAMESPACE,
        ),
        labels=wire.string_map(meta, "labels", f"{where}.metadata."),
        raw=value,
    )


def _objects(data: dict[str, Any], key: str, hook: str) -> Objects:
    owner_key, infra_key, bootstrap_key, owner_kind = _OBJECT_KEYS[hook]
    group = wire.field(data, key, dict, "", required=True)
    bootstrap = group.get(bootstrap_key)
    return Objects(
        owner=_object(
            group.get(owner_key), f"{key}.{owner_key}", kind=owner_kind, group=_CLUSTER_GROUP
        ),
        infrastructure=_object(group.get(infra_key), f"{key}.{infra_key}"),
        bootstrap=None if bootstrap is None else _object(bootstrap, f"{key}.{bootstrap_key}"),
    )


def _version(data: dict[str, Any], key: str, *, required: bool) -> str:
    text: str = wire.field(data, key, str, "", required=required, max_length=wire.MAX_VERSION)
    if text:
        try:
            semver.parse(text)
        except semver.VersionError:
            raise wire.BadRequest(
                f"{key} must be a version such as v1.33.0, got {wire.excerpt(text)}"
            ) from None
    return text


def parse(hook: catalog.Hook, body: bytes) -> OptionalCall:
    """Parse `body` as the optional `hook`'s request; raise BadRequest naming the first problem."""
    data = wire.decode(body)
    wire.check_type_meta(data, hook.request_kind)
    settings = wire.string_map(data, "settings", "")
    if hook.name == "GenerateUpgradePlan":
        cp_text = _version(data, "fromControlPlaneKubernetesVersion", required=True)
        workers_text = _version(data, "fromWorkersKubernetesVersion", required=False)
        to_text = _version(data, "toKubernetesVersion", required=True)
        return UpgradePlanCall(
            hook=hook,
            settings=settings,
            cluster=wire.parse_cluster(data.get("cluster")),
            from_control_plane=semver.parse(cp_text),
            from_workers=semver.parse(workers_text) if workers_text else None,
            to=semver.parse(to_text),
            from_control_plane_text=cp_text,
            from_workers_text=workers_text,
            to_text=to_text,
        )
    if hook.name == "UpdateMachine":
        return UpdateMachineCall(
            hook=hook, settings=settings, desired=_objects(data, "desired", hook.name)
        )
    return CanUpdateCall(
        hook=hook,
        settings=settings,
        current=_objects(data, "current", hook.name),
        desired=_objects(data, "desired", hook.name),
    )


#: Run moments are at most this long (Run.moment); a longer Machine name is cut and hashed.
MAX_MOMENT = 200


def update_moment(call: UpdateMachineCall) -> str:
    """`<machine>@<digest of the desired specs>`: one run per requested update."""
    name = call.desired.owner.name
    if len(name) + 1 + DIGEST_LENGTH > MAX_MOMENT:
        cut = MAX_MOMENT - 2 * DIGEST_LENGTH - 2
        name = f"{name[:cut]}~{hashlib.sha256(name.encode()).hexdigest()[:DIGEST_LENGTH]}"
    return f"{name}@{call.digest}"


def machine_of(moment: str) -> tuple[str, str] | None:
    """(Machine name, desired-spec digest) of an UpdateMachine run's `update_moment`."""
    name, at, digest = moment.rpartition("@")
    return (name, digest) if at and name else None


def update_hook_call(call: UpdateMachineCall) -> wire.HookCall:
    """UpdateMachine as the engine's hook call: the Machine's Cluster (namespace and
    spec.clusterName; the request has no UID) with the Machine's labels, which templates'
    clusterSelector.matchLabels match, and the Machine as the runs' steps see it."""
    owner = call.desired.owner
    meta = owner.raw.get("metadata") or {}
    annotations = meta.get("annotations")
    version = owner.spec.get("version")
    return wire.HookCall(
        hook=call.hook,
        settings=call.settings,
        cluster=wire.Cluster(
            name=call.desired.cluster_name,
            namespace=owner.namespace,
            uid="",
            labels=owner.labels,
            annotations=annotations if isinstance(annotations, dict) else {},
            deletion_timestamp="",
            topology_version=version if isinstance(version, str) else "",
            class_name="",
            class_namespace="",
        ),
        update_moment=update_moment(call),
        machine={
            "name": owner.name,
            "namespace": owner.namespace,
            "labels": owner.labels,
            "version": version if isinstance(version, str) else "",
            "digest": call.digest,
            "spec": owner.spec,
            "infrastructureMachine": {
                "kind": call.desired.infrastructure.kind,
                "name": call.desired.infrastructure.name,
            },
        },
    )


def record_fields(call: OptionalCall) -> tuple[str, str, str, str]:
    """(cluster key, cluster namespace, cluster name, moment) for the hook-call record."""
    if isinstance(call, UpgradePlanCall):
        moment = f"{call.from_control_plane_text}->{call.to_text}"
        return call.cluster.key, call.cluster.namespace, call.cluster.name, moment
    objects = call.desired
    owner = objects.owner
    cluster = objects.cluster_name
    moment = f"{owner.kind}/{owner.name}"
    if isinstance(call, UpdateMachineCall):
        moment = update_moment(call)
    return wire.cluster_key("", owner.namespace, cluster), owner.namespace, cluster, moment
