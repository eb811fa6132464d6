"""The resource controller: hooksvc's custom resources kept in sync with PostgreSQL.

One `Resources` loop per kind (WorkflowTemplate, AddonProfile, InPlacePolicy,
UpgradePolicy of `hooks.hooksvc.io`)
lists and watches the resources (`workflows.controllers.listwatch`) and applies each
with the validation and the writers apply_workflows uses (`spec.resource_spec`,
`apply.template_upsert`, `apply.profile_upsert` and `templates_sync`), as templates and
profiles of the source `resource`. It writes the resource's `status` through the status
subresource: `observedGeneration`, and the condition `Accepted` (True, or False with the
exact message apply_workflows would print, minus the file and document; the last
accepted spec stays in force meanwhile). A deleted resource's template or profile is
deleted (runs keep their snapshot) as soon as the resource has a deletionTimestamp, even
while a finalizer holds the object; a list after a watch gap deletes those whose resource
is gone. A name held by another source (apply_workflows, the admin, a profile's generated
template) is refused on the resource's status.

A status write is conditional on the resourceVersion the controller read, as every
controller's update is: events come in order but late, so the object in hand may be older
than the one stored, and a merge patch replaces `conditions` whole; a 409 reads the
resource again and recomputes from it (keeping the conditions other writers added).

No write storm: a template or profile is written only when its spec changed (the
generation rule of the upserts), and the status only when it differs from what the
resource shows; the controller's own status writes come back as watch events that change
nothing. Every `RESYNC_SECONDS` (at a watch renewal) every cached resource is evaluated
again, which picks up what changed in hooksvc's database only (a conflicting template
deleted in the admin, a profile's dependency created by apply_workflows).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from typing import Any

from django.db import transaction

from hooksvc import metrics
from workflows.controllers import listwatch
from workflows.definitions import addons, apply, crds, fields, policies, spec
from workflows.kube import k8s
from workflows.models import AddonProfile, WorkflowTemplate
from workflows.policy_model import Policy

logger = logging.getLogger(__name__)

RESYNC_SECONDS = 60.0
#: Status writes tried per reconcile when others keep changing the resource (409).
STATUS_WRITE_TRIES = 3
#: A condition's message has at most 32768 characters (metav1.Condition).
MAX_MESSAGE = 32768
_MERGE = "application/merge-patch+json"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What hooksvc made of one generation of a resource."""

    accepted: bool
    reason: str
    message: str


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class Resources(listwatch.ListWatch):
    """Keeps the templates (or profiles) of source `resource` equal to the resources of `kind`."""

    def __init__(self, kind: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = kind
        self.what = f"{spec.PLURALS[kind]}.{spec.GROUP}"
        #: The latest object of each resource, by name.
        self.objects: dict[str, dict[str, Any]] = {}
        #: (generation, verdict) last written for each resource, to skip our own echoes.
        self.seen: dict[str, tuple[int, Verdict]] = {}
        self.last_resync = time.monotonic()

    def collection(self) -> str:
        return f"/apis/{spec.GROUP}/{crds.VERSION}/{spec.PLURALS[self.kind]}"

    def counted(self, outcome: str) -> None:
        metrics.RESOURCE_PASSES.labels(kind=self.kind, outcome=outcome).inc()

    # --- events --------------------------------------------------------------------

    def listed(self, items: list[dict[str, Any]]) -> None:
        self.objects = {_name(o): o for o in items if _name(o) and not _deleting(o)}
        self.seen.clear()
        gone = self._remove_missing()
        self.resync()
        if gone:
            logger.info(
                "resources gone while unwatched: removed",
                extra={"action": "resource_removed", "kind": self.kind, "names": gone},
            )

    def changed(self, kind: str, obj: dict[str, Any]) -> None:
        name = _name(obj)
        if not name:
            return
        if kind == "DELETED" or _deleting(obj):
            if kind != "DELETED" and name not in self.objects:
                return  # its removal was handled when its deletion began
            self.objects.pop(name, None)
            self.seen.pop(name, None)
            self._remove([name])
            logger.info(
                "resource deleted: removed",
                extra={"action": "resource_removed", "kind": self.kind, "names": [name]},
            )
            if self.kind == "AddonProfile":
                self.resync()  # the profiles that depended on it now say so
            return
        self.objects[name] = obj
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        seen = self.seen.get(name)
        if seen is not None and seen[0] == generation and self._shows(obj, seen[1]):
            return  # our own status write coming back, or a change of metadata only
        accepted_before = self._accepted_names()
        self._reconcile(obj)
        if self.kind == "AddonProfile" and self._accepted_names() != accepted_before:
            self.resync()  # a dependency appeared or went away for the others

    def renewed(self) -> None:
        if time.monotonic() - self.last_resync >= RESYNC_SECONDS:
            self.resync()

    def resync(self) -> None:
        """Evaluate every cached resource again (writes only what changed)."""
        self.last_resync = time.monotonic()
        # Profiles may depend on each other: go round while one more gets accepted.
        for _ in range(max(1, len(self.objects))):
            before = self._accepted_names()
            for name in sorted(self.objects):
                self._reconcile(self.objects[name])
            if self.kind != "AddonProfile" or self._accepted_names() == before:
                break

    # --- one resource ----------------------------------------------------------------

    def _accepted_names(self) -> set[str]:
        return {name for name, (_, verdict) in self.seen.items() if verdict.accepted}

    def _reconcile(self, obj: dict[str, Any]) -> None:
        try:
            verdict, summary = self._apply(obj)
        except Exception:
            # The database is away, say: the status stays as it was, the next pass retries.
            logger.exception(
                "applying a resource failed",
                extra={"action": "resource_failed", "kind": self.kind, "resource": _name(obj)},
            )
            return
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        self.seen[_name(obj)] = (generation, verdict)
        self._write_status(obj, verdict, summary)

    def _apply(self, obj: dict[str, Any]) -> tuple[Verdict, dict[str, Any]]:
        name = _name(obj)
        try:
            fields.name(name, "metadata.name")
            body = spec.resource_spec(self.kind, name, obj)
        except fields.FieldError as exc:
            return Verdict(False, "Invalid", str(exc)), self._summary(name)
        try:
            if self.kind == "WorkflowTemplate":
                outcome = apply.template_upsert(name=name, spec_=body, source=spec.RESOURCE)
            elif self.kind in apply.POLICY_KINDS:
                outcome = apply.policy_upsert(
                    kind=self.kind, name=name, spec_=body, source=spec.RESOURCE
                )
            else:
                problems, outcome = self._profile_apply(name, body)
                if problems:
                    return Verdict(False, "Invalid", "; ".join(problems)), self._summary(name)
        except apply.SourceConflict as exc:
            message = f"{exc}; delete one of them, or rename this resource"
            return Verdict(False, "Conflict", message), self._summary(name)
        if outcome is not apply.Outcome.UNCHANGED:
            metrics.RESOURCE_WRITES.labels(kind=self.kind, what="spec").inc()
            logger.info(
                f"resource {outcome}",
                extra={"action": "resource_applied", "kind": self.kind, "resource": name},
            )
        return Verdict(True, "Applied", "hooksvc runs this spec"), self._summary(name)

    def _profile_apply(self, name: str, body: dict[str, Any]) -> tuple[list[str], apply.Outcome]:
        with transaction.atomic():
            apply.lock()
            graph = {p.name: list(p.spec["dependsOn"]) for p in AddonProfile.objects.all()}
            problems = spec.profile_problems({**graph, name: list(body["dependsOn"])})
            problems += [
                f"metadata.name: the WorkflowTemplate {taken!r} exists and is not generated; "
                "rename one of them"
                for taken in addons.clashes([name])
            ]
            if problems:
                return problems, apply.Outcome.UNCHANGED
            outcome = apply.profile_upsert(name=name, spec_=body, source=spec.RESOURCE)
            if outcome is not apply.Outcome.UNCHANGED:
                apply.templates_sync()
            return [], outcome

    def _summary(self, name: str) -> dict[str, Any]:
        """What the status says of what hooksvc runs for this resource now."""
        if self.kind == "WorkflowTemplate":
            found = WorkflowTemplate.objects.filter(name=name, managed_by=spec.RESOURCE).first()
            return {"steps": len(found.spec["steps"])} if found is not None else {}
        if self.kind in apply.POLICY_KINDS:
            return {}
        if not AddonProfile.objects.filter(name=name, managed_by=spec.RESOURCE).exists():
            return {}
        owned = WorkflowTemplate.objects.filter(managed_by=addons.managed_by(name))
        return {"templates": sorted(owned.values_list("name", flat=True))}

    def _remove(self, names: list[str]) -> None:
        with transaction.atomic():
            apply.lock()
            if self.kind == "WorkflowTemplate":
                # Runs keep their spec snapshot: Run.template is SET_NULL.
                WorkflowTemplate.objects.filter(name__in=names, managed_by=spec.RESOURCE).delete()
            elif self.kind in apply.POLICY_KINDS:
                policies.forget()
                Policy.objects.filter(
                    kind=self.kind, name__in=names, managed_by=spec.RESOURCE
                ).delete()
            else:
                AddonProfile.objects.filter(name__in=names, managed_by=spec.RESOURCE).delete()
                apply.templates_sync()

    def _remove_missing(self) -> list[str]:
        stored: set[str]
        if self.kind in apply.POLICY_KINDS:
            policies = Policy.objects.filter(kind=self.kind, managed_by=spec.RESOURCE)
            stored = set(policies.values_list("name", flat=True))
        else:
            model = WorkflowTemplate if self.kind == "WorkflowTemplate" else AddonProfile
            stored = set(
                model.objects.filter(managed_by=spec.RESOURCE).values_list("name", flat=True)
            )
        gone = sorted(set(stored) - set(self.objects))
        if gone:
            self._remove(gone)
        return gone

    # --- status ----------------------------------------------------------------------

    def _shows(self, obj: dict[str, Any], verdict: Verdict) -> bool:
        status = obj.get("status") or {}
        current = _accepted(status)
        generation = (obj.get("metadata") or {}).get("generation")
        return (
            current is not None
            and current.get("status") == ("True" if verdict.accepted else "False")
            and current.get("reason") == verdict.reason
            and current.get("message") == verdict.message[:MAX_MESSAGE]
            and status.get("observedGeneration") == generation
        )

    def _write_status(self, obj: dict[str, Any], verdict: Verdict, summary: dict[str, Any]) -> None:
        name = _name(obj)
        path = f"{self.collection()}/{name}"
        generation = (obj.get("metadata") or {}).get("generation")
        for _ in range(STATUS_WRITE_TRIES):
            old = dict(obj.get("status") or {})
            new = desired_status(obj, verdict, summary)
            if new == old:
                return
            # The resourceVersion makes a write from an out-of-date copy a 409.
            body = {
                "metadata": {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion")},
                "status": {**{k: None for k in old if k not in new}, **new},
            }
            what = f"{self.what}/{name} status"
            api = k8s.management_api()
            try:
                written = k8s.request(
                    api, "PATCH", f"{path}/status", what=what, body=body, content_type=_MERGE
                )
            except k8s.NotFound:
                return  # deleted meanwhile: its DELETED event follows
            except k8s.Conflict:
                try:
                    obj = k8s.request(api, "GET", path, what=f"{self.what}/{name}")
                except k8s.NotFound:
                    return
                if (obj.get("metadata") or {}).get("generation") != generation:
                    return  # its spec changed since: that generation's event reconciles it
                continue
            metrics.RESOURCE_WRITES.labels(kind=self.kind, what="status").inc()
            if name in self.objects:
                self.objects[name] = written
            return
        logger.warning(
            "status not written: the resource kept changing; the next resync writes it",
            extra={"action": "resource_status_conflict", "kind": self.kind, "resource": name},
        )


def _deleting(obj: dict[str, Any]) -> bool:
    """Deletion has begun: finalizers may hold the object, but it is going (apiserver
    registry/generic/registry/store.go Delete, updateForGracefulDeletionAndFinalizers)."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _accepted(status: dict[str, Any]) -> dict[str, Any] | None:
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == crds.ACCEPTED:
            return condition
    return None


def desired_status(
    obj: dict[str, Any], verdict: Verdict, summary: dict[str, Any]
) -> dict[str, Any]:
    """The status `obj` should show: other conditions kept, Accepted as `verdict` says.

    lastTransitionTime moves only when the condition's status changes (metav1.Condition).
    """
    old = obj.get("status") or {}
    generation = int((obj.get("metadata") or {}).get("generation") or 0)
    status = "True" if verdict.accepted else "False"
    previous = _accepted(old)
    condition = {
        "type": crds.ACCEPTED,
        "status": status,
        "observedGeneration": generation,
        "lastTransitionTime": (
            previous["lastTransitionTime"]
            if previous is not None
            and previous.get("status") == status
            and previous.get("lastTransitionTime")
            else _now()
        ),
        "reason": verdict.reason,
        "message": verdict.message[:MAX_MESSAGE],
    }
    others = [
        c
        for c in old.get("conditions") or []
        if isinstance(c, dict) and c.get("type") != crds.ACCEPTED
    ]
    return {"observedGeneration": generation, "conditions": [*others, condition], **summary}
