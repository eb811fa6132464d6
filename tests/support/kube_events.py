"""core/v1 Events as kube-controller-manager's controllers record them, for the emulator.

The controllers of the emulator (`kube_jobs`) call `record` where theirs call client-go's
`record.EventRecorder` (kubernetes staging/src/k8s.io/client-go/tools/record/event.go
`makeEvent`, events_cache.go `EventCorrelator`): an Event in the object's namespace named
`<object>.<hex>`, with the involved object, reason, message, type and `source.component`;
the same event again (same object, reason, message, type, source) bumps `count` and
`lastTimestamp` of that Event instead of making a new one; one the API server refuses (its
namespace is being deleted) is dropped. Not modelled: the aggregation
of ten similar events with different messages into "(combined from similar events)".
"""

from __future__ import annotations

import copy
import datetime
import itertools
from typing import Literal

from tests.support.kube_semantics import JSON, ApiError
from tests.support.kube_store import Store

EVENTS = ("", "v1", "events")
_serial = itertools.count(1)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(
    store: Store,
    obj: JSON,
    *,
    type: Literal["Normal", "Warning"],
    reason: str,
    message: str,
    component: str,
) -> JSON:
    """Record an Event about `obj` (its apiVersion and kind filled), or bump its twin's count."""
    meta = obj["metadata"]
    involved = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "namespace": meta.get("namespace", ""),
        "name": meta["name"],
        "uid": meta["uid"],
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    namespace = meta.get("namespace") or "default"
    for key, found in store.objects.items():
        if key[:3] != ("", "events", namespace):
            continue
        same = (found.get("involvedObject") or {}).get("uid") == meta["uid"] and (
            found.get("reason"),
            found.get("message"),
            found.get("type"),
            (found.get("source") or {}).get("component"),
        ) == (reason, message, type, component)
        if same:
            bumped = copy.deepcopy(found)
            bumped["count"] = int(found.get("count") or 1) + 1
            bumped["lastTimestamp"] = _now()
            return store.write(store.served(*EVENTS), bumped)
    now = _now()
    event = {
        "metadata": {"name": f"{meta['name']}.{next(_serial):016x}", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": type,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        return store.create(store.served(*EVENTS), namespace, event)
    except ApiError:
        return {}  # a namespace being deleted: the recorder drops the event (and logs it)
