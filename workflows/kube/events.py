"""Kubernetes Events on the CAPI Cluster for each run's start, success and failure, for
a run that starts waiting for a person (what it asks, and the command that approves it),
and for a step that stalls (a Warning: workflows.engine.stalls).

`kubectl describe cluster` then tells the story next to CAPI's own events. The worker emits
them (never the hook path): the engine task that made the transition emits its Events once
its work is done (`emit_for_task`; workflows.engine.dispatch.events_in_task collects them
after each commit); a transition made elsewhere (an operator's action) sends the
`workflows.cluster_event` task, which calls `emit`. Best effort: an unreachable API server
is retried a few times by that task (an engine task hands it the Events it could not emit,
and for `PAUSE_SECONDS` sends it every Event rather than wait on the API server itself),
anything else is logged and dropped, and without a management cluster (no kubeconfig, not
in a Pod: `make run` on a laptop) it logs once and skips. Reasons and messages are
deterministic, so a repeat bumps the same Event's count.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import time
from collections.abc import Sequence
from typing import Any, Literal

from workflows import errors
from workflows.kube import k8s
from workflows.models import Run

logger = logging.getLogger(__name__)

STARTED, SUCCEEDED, FAILED = "started", "succeeded", "failed"
#: Its message comes with the task (the engine writes it: workflows.engine.messages).
AWAITING_APPROVAL = "awaiting_approval"
#: A step made no progress for longer than its type says is normal (workflows.engine.stalls,
#: which writes the message).
STALLED = "stalled"
REASONS = {
    STARTED: "HooksvcWorkflowStarted",
    SUCCEEDED: "HooksvcWorkflowSucceeded",
    FAILED: "HooksvcWorkflowFailed",
    AWAITING_APPROVAL: "HooksvcAwaitingApproval",
    STALLED: "HooksvcStepStalled",
}
#: The outcomes a person should look at: Warning Events.
WARNINGS = frozenset({FAILED, STALLED})

_skipped_logged = False

#: After an API server did not answer, engine tasks leave their Events to the retrying
#: task for this long: each would otherwise wait up to k8s.REQUEST_TIMEOUT's connect time.
PAUSE_SECONDS = 30.0
_paused_until = 0.0


def message(run: Run, outcome: str) -> str:
    """`workflow backup-before-upgrade started for BeforeClusterUpgrade v1.33.0`."""
    moment = f" {run.moment}" if run.moment else ""
    text = f"workflow {run.template_name} {outcome} for {run.hook}{moment}"
    if outcome == FAILED:
        failed = run.steps.filter(state="failed").order_by("position").first()
        text += f" at step {failed.name}" if failed else ""
    return text


def event_name(cluster_name: str, reason: str, message: str) -> str:
    """The same story gives the same Event, so repeating it bumps a count."""
    digest = hashlib.sha256(f"{reason}\n{message}".encode()).hexdigest()[:12]
    return f"{cluster_name}.hooksvc.{reason.lower()}.{digest}"


def emit_event(
    *,
    namespace: str,
    cluster_name: str,
    cluster_uid: str,
    reason: str,
    message: str,
    type: Literal["Normal", "Warning"] = "Normal",
) -> None:
    """Record a core/v1 Event on the Cluster, or bump the count of the same one."""
    api = k8s.core(k8s.management_api())
    name = event_name(cluster_name, reason, message)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    what = f"Event {namespace}/{name}"
    body = {
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "apiVersion": f"{k8s.CLUSTER_GROUP}/{k8s.CLUSTER_VERSIONS[0]}",
            "kind": "Cluster",
            "name": cluster_name,
            "namespace": namespace,
            "uid": cluster_uid,
        },
        "reason": reason,
        "message": message,
        "type": type,
        "source": {"component": "hooksvc"},
        "reportingComponent": "hooksvc",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        k8s.call(api.create_namespaced_event, namespace, body, what=what)
        return
    except k8s.Conflict:
        pass
    for _ in range(3):
        found = k8s.call(api.read_namespaced_event, name, namespace, what=what)
        patch = {
            # The resourceVersion makes a concurrent bump a 409, retried from a fresh read.
            "metadata": {
                "resourceVersion": found.metadata.resource_version if found.metadata else None
            },
            "count": (found.count or 1) + 1,
            "lastTimestamp": now,
        }
        merge = "application/merge-patch+json"
        patch_event = api.patch_namespaced_event
        try:
            k8s.call(patch_event, name, namespace, patch, _content_type=merge, what=what)
            return
        except k8s.Conflict:
            continue
    raise k8s.Conflict(f"{what}: changed concurrently three times")


def emit(run_id: int, outcome: str, text: str = "") -> None:
    """Record the run's `outcome` as an Event on its Cluster (`text`, or the outcome's own
    message); K8sErrors propagate."""
    global _skipped_logged
    if not k8s.management_configured():
        if not _skipped_logged:
            _skipped_logged = True
            logger.info(
                "no management cluster configured; Cluster events are not emitted",
                extra={"action": "cluster_events_off"},
            )
        return
    run = Run.objects.filter(pk=run_id).first()
    if run is None:  # deleted since (a test database, an operator)
        return
    emit_event(
        namespace=run.cluster_namespace,
        cluster_name=run.cluster_name,
        cluster_uid=str((run.context.get("cluster") or {}).get("uid") or ""),
        reason=REASONS[outcome],
        message=text or message(run, outcome),
        type="Warning" if outcome in WARNINGS else "Normal",
    )


def emit_for_task(collected: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Emit an engine task's Events (`emit`'s arguments) in order; return those left for the
    retrying task: from the first the API server did not answer on, or all while paused."""
    global _paused_until
    for done, args in enumerate(collected):
        if time.monotonic() < _paused_until:
            return list(collected[done:])
        try:
            emit(*args)
        except errors.TemporaryError:
            _paused_until = time.monotonic() + PAUSE_SECONDS
            return list(collected[done:])
        except errors.StepError:
            logger.warning(
                "cluster event dropped", extra={"action": "event_dropped", "run": args[0]}
            )
    return []
