"""The typed template: a stored template spec read once into frozen values, defaults in one place.

`workflows.definitions.spec` validates an operator's document into a `Template` and stores
`Template.as_spec()` (the camelCase dict in `WorkflowTemplate.spec`, snapshotted in
`Run.spec`); everything that reads a stored spec (the hook path, the engine, operator
actions) reads it back with `of(spec)`. A field the stored dict leaves out or sets to null
takes the default declared here, so an old row and a hand-made test spec read alike.

The hook path gets specs as jsonb text in its one query: `decode(text)` parses each
distinct text once and keeps the dict and its Template (PostgreSQL prints jsonb in one
canonical form, so the same spec is the same text), and `of(spec)` on such a dict answers
from that cache. The cached dicts are shared: never change a spec in place.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from hooksvc.contract import catalog

DEFAULT_RETRIES = 3
#: A step's error budget in time: temporary errors fail it only once they have lasted this
#: long (and more than `retries` attempts in a row), so an API server away for a few
#: minutes (an upgrade of the management cluster) never fails a step (docs/templates.md,
#: "Timeouts and retries").
DEFAULT_RETRY_FOR_SECONDS = 300
DEFAULT_RETRY_AFTER_SECONDS = 10
#: The choices of the template's policies; the first is the default.
ON_FAILURE = ("Block", "Fail")
ON_DEADLINE = ("Block", "Proceed", "Fail")
BLOCK, PROCEED, FAIL = "Block", "Proceed", "Fail"
CLUSTER_DELETED = catalog.CLUSTER_DELETED.name


def holds_by_default(hook: str) -> bool:
    """A run holds its hook unless nothing calls it: no CAPI call comes with ClusterDeleted."""
    return hook != CLUSTER_DELETED


@dataclasses.dataclass(frozen=True)
class Selector:
    """`spec.clusterSelector`: only the parts given (None: not given, matches anything)."""

    namespaces: tuple[str, ...] | None = None
    match_labels: Mapping[str, str] | None = None
    cluster_class: str | None = None

    def as_spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.namespaces is not None:
            out["namespaces"] = list(self.namespaces)
        if self.match_labels is not None:
            out["matchLabels"] = dict(self.match_labels)
        if self.cluster_class is not None:
            out["clusterClass"] = self.cluster_class
        return out


@dataclasses.dataclass(frozen=True)
class Step:
    """One `spec.steps[]` entry; `params` is its `with`, defaults of its type filled in."""

    name: str
    type: str
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: None: the step type's default_timeout_seconds; 0: none (the template says so).
    timeout_seconds: int | None = None
    retries: int = DEFAULT_RETRIES
    retry_for_seconds: int = DEFAULT_RETRY_FOR_SECONDS
    depends_on: tuple[str, ...] = ()
    #: None: the step type's normal bound (workflows.engine.stalls); 0: never stalled.
    stall_seconds: int | None = None

    def as_spec(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "with": dict(self.params),
            "timeoutSeconds": self.timeout_seconds,
            "retries": self.retries,
            "retryForSeconds": self.retry_for_seconds,
            "dependsOn": list(self.depends_on),
            # Only when given: a spec stored before the field existed normalizes the same,
            # so applying it again bumps no template's generation.
            **({"stallSeconds": self.stall_seconds} if self.stall_seconds is not None else {}),
        }


@dataclasses.dataclass(frozen=True)
class Template:
    """A WorkflowTemplate's spec as the engine reads it (docs/templates.md)."""

    hook: str
    steps: tuple[Step, ...] = ()
    cluster_selector: Selector = Selector()
    settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: The most CAPI waits between calls; the cap of a computed retryAfterSeconds.
    retry_after_seconds: int = DEFAULT_RETRY_AFTER_SECONDS
    #: While a run waits only for a person; None: retry_after_seconds.
    approval_retry_after_seconds: int | None = None
    on_failure: str = ON_FAILURE[0]
    deadline_seconds: int | None = None
    on_deadline: str = ON_DEADLINE[0]
    #: At most this many runs of the template at once, fleet-wide; None: no limit.
    concurrency: int | None = None
    wait_for: tuple[str, ...] = ()
    #: None: holds_by_default(hook). False: the run goes on in the background.
    holds: bool | None = None

    @property
    def holds_lifecycle(self) -> bool:
        return holds_by_default(self.hook) if self.holds is None else self.holds

    @property
    def person_retry_after_seconds(self) -> int:
        """What a run that waits only for a person answers."""
        return self.approval_retry_after_seconds or self.retry_after_seconds

    def as_spec(self) -> dict[str, Any]:
        """The stored form (`WorkflowTemplate.spec`), every field present."""
        return {
            "hook": self.hook,
            "clusterSelector": self.cluster_selector.as_spec(),
            "settings": dict(self.settings),
            "retryAfterSeconds": self.retry_after_seconds,
            "approvalRetryAfterSeconds": self.approval_retry_after_seconds,
            "onFailure": self.on_failure,
            "deadlineSeconds": self.deadline_seconds,
            "onDeadline": self.on_deadline,
            "concurrency": self.concurrency,
            "waitFor": list(self.wait_for),
            "holdsLifecycle": self.holds_lifecycle,
            "steps": [s.as_spec() for s in self.steps],
        }


def _given(spec: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The stored keys present and not null, under their attribute names."""
    return {attr: spec[key] for key, attr in names.items() if spec.get(key) is not None}


_TEMPLATE_SCALARS = {
    "retryAfterSeconds": "retry_after_seconds",
    "approvalRetryAfterSeconds": "approval_retry_after_seconds",
    "onFailure": "on_failure",
    "deadlineSeconds": "deadline_seconds",
    "onDeadline": "on_deadline",
    "concurrency": "concurrency",
    "holdsLifecycle": "holds",
}
_STEP_SCALARS = {
    "timeoutSeconds": "timeout_seconds",
    "retries": "retries",
    "retryForSeconds": "retry_for_seconds",
    "stallSeconds": "stall_seconds",
}


def _step(step: Mapping[str, Any]) -> Step:
    return Step(
        name=step["name"],
        type=step["type"],
        params=step.get("with") or {},
        depends_on=tuple(step.get("dependsOn") or ()),
        **_given(step, _STEP_SCALARS),
    )


def _selector(selector: Mapping[str, Any]) -> Selector:
    namespaces = selector.get("namespaces")
    return Selector(
        namespaces=tuple(namespaces) if namespaces is not None else None,
        match_labels=selector.get("matchLabels"),
        cluster_class=selector.get("clusterClass"),
    )


def of(spec: Mapping[str, Any]) -> Template:
    """The typed form of a stored spec (from `decode`'s cache when it came from there)."""
    cached = _by_identity.get(id(spec))
    if cached is not None and cached[0] is spec:
        return cached[1]
    return _build(spec)


def _build(spec: Mapping[str, Any]) -> Template:
    return Template(
        hook=spec["hook"],
        steps=tuple(_step(s) for s in spec.get("steps") or ()),
        cluster_selector=_selector(spec.get("clusterSelector") or {}),
        settings=spec.get("settings") or {},
        wait_for=tuple(spec.get("waitFor") or ()),
        **_given(spec, _TEMPLATE_SCALARS),
    )


#: Distinct spec texts kept by `decode`; a fleet has tens of templates, each run a snapshot.
CACHE_SIZE = 2048
_by_text: OrderedDict[str, tuple[dict[str, Any], Template]] = OrderedDict()
#: The same entries by the dict's id: the cache holds the dict, so its id is not reused.
_by_identity: dict[int, tuple[dict[str, Any], Template]] = {}
_lock = threading.Lock()


def decode(text: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
    """A stored spec as the hook query returns it (jsonb text), parsed once per distinct text.

    A dict (a driver that decodes jsonb itself) is returned as it is.
    """
    if isinstance(text, Mapping):
        return dict(text)
    key = text.decode() if isinstance(text, bytes) else text
    with _lock:
        found = _by_text.get(key)
        if found is not None:
            _by_text.move_to_end(key)
            return found[0]
    spec: dict[str, Any] = json.loads(key)
    entry = (spec, _build(spec))
    with _lock:
        if (raced := _by_text.get(key)) is not None:  # another thread decoded it meanwhile
            return raced[0]
        _by_text[key] = entry
        _by_identity[id(spec)] = entry
        while len(_by_text) > CACHE_SIZE:
            _, (old, _template) = _by_text.popitem(last=False)
            _by_identity.pop(id(old), None)
    return spec
