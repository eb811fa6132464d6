"""Operators' YAML documents, validated into the normalized specs the engine reads.

`parse(text)` loads every document of a file and validates each through the table
`KINDS` (kind -> validator): `WorkflowTemplate`, `AddonProfile`, and the policies of
in-place updates and upgrade plans (`workflows.definitions.policies`). The result for a
template is the dict stored in `WorkflowTemplate.spec` and snapshotted in `Run.spec`,
with every default filled in; a profile's is stored in `AddonProfile.spec` and turned
into templates by `workflows.definitions.addons`. Unknown fields are errors: an operator's
typo must not silently do nothing. `apply_workflows` and the tests are the callers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, cast

import yaml

from hooksvc.contract import catalog
from workflows.definitions import fields, graphs, policies, typed
from workflows.steps import registry

API_VERSION = "hooksvc/v1alpha1"
#: The API group of hooksvc's CustomResourceDefinitions (`workflows.definitions.crds`).
GROUP = "hooks.hooksvc.io"
RESOURCE_API_VERSION = f"{GROUP}/v1alpha1"
#: A document may name either: the same file then applies with kubectl and apply_workflows.
API_VERSIONS = (RESOURCE_API_VERSION, API_VERSION)
#: `managed_by` of a template or profile kept in sync with a custom resource of GROUP.
RESOURCE = "resource"
#: The resource (plural) name of each kind in GROUP.
PLURALS = {
    "WorkflowTemplate": "workflowtemplates",
    "AddonProfile": "addonprofiles",
    "InPlacePolicy": "inplacepolicies",
    "UpgradePolicy": "upgradepolicies",
}
#: StepRun.retries is a small integer; more retries than this are a typo, not a plan.
MAX_RETRIES = 100
MAX_STEPS = 200
#: The defaults live with the typed template (workflows.definitions.typed).
DEFAULT_RETRIES = typed.DEFAULT_RETRIES
DEFAULT_RETRY_FOR_SECONDS = typed.DEFAULT_RETRY_FOR_SECONDS
#: A week: a longer budget for temporary errors is a typo, not a plan.
MAX_RETRY_FOR_SECONDS = 7 * 24 * 3600
DEFAULT_RETRY_AFTER_SECONDS = typed.DEFAULT_RETRY_AFTER_SECONDS
#: The hooks a template may name, and hooksvc's own moment after a Cluster is gone.
TEMPLATE_HOOKS: tuple[str, ...] = tuple(catalog.MOMENTS)
CLUSTER_DELETED = typed.CLUSTER_DELETED
ON_FAILURE = typed.ON_FAILURE
ON_DEADLINE = typed.ON_DEADLINE


def resource_name(kind: str, name: str) -> str:
    """A custom resource as kubectl names it: `workflowtemplates.hooks.hooksvc.io/NAME`."""
    return f"{PLURALS[kind]}.{GROUP}/{name}"


class SpecError(ValueError):
    """A file holds an invalid document; each line of the message names a document and field."""

    def __init__(self, messages: Sequence[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = list(messages)


@dataclasses.dataclass(frozen=True)
class Document:
    """One valid document: its 1-based position in the file, kind, name and normalized spec."""

    index: int
    kind: str
    name: str
    spec: dict[str, Any]


class _Loader(yaml.SafeLoader):
    """safe_load, except that a key given twice is an error instead of the last one winning."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader rejects unhashable keys itself
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _selector(value: Any) -> typed.Selector:
    where = "spec.clusterSelector"
    if value is None:
        return typed.Selector()
    raw = fields.mapping(value, where, ("namespaces", "matchLabels", "clusterClass"))
    # Only the given parts: an empty list or string would read as "match anything".
    namespaces = None
    if "namespaces" in raw:
        namespaces = tuple(fields.names(raw["namespaces"], f"{where}.namespaces", fields.string))
        if not namespaces:
            raise fields.FieldError(f"{where}.namespaces", "must list at least one namespace")
    return typed.Selector(
        namespaces=namespaces,
        match_labels=(
            fields.string_map(raw["matchLabels"], f"{where}.matchLabels")
            if "matchLabels" in raw
            else None
        ),
        cluster_class=(
            fields.string(raw["clusterClass"], f"{where}.clusterClass")
            if "clusterClass" in raw
            else None
        ),
    )


STEP_FIELDS = (
    "name",
    "type",
    "with",
    "timeoutSeconds",
    "retries",
    "retryForSeconds",
    "dependsOn",
    "stallSeconds",
)


def _step(value: Any, where: str, hook: str) -> typed.Step:
    """One step; every problem of its fields at once (FieldErrors)."""
    problems = fields.Problems()
    raw = fields.mapping(value, where, STEP_FIELDS, required=("name", "type"), problems=problems)
    # Missing, they are noted as required: no second message for the same field.
    name = (
        problems.check(fields.name, raw["name"], f"{where}.name")
        if raw.get("name") is not None
        else None
    )
    step_type = (
        problems.check(fields.string, raw["type"], f"{where}.type")
        if raw.get("type") is not None
        else None
    )
    given = raw.get("with")
    params: dict[str, Any] | None = None
    if given is not None and not isinstance(given, dict):
        problems.add(fields.FieldError(f"{where}.with", "must be an object"))
    elif step_type:
        params = problems.check(_params, step_type, given or {}, where, hook)
    budget = {
        attr: value
        for attr, key, maximum in (
            ("retries", "retries", MAX_RETRIES),
            ("retry_for_seconds", "retryForSeconds", MAX_RETRY_FOR_SECONDS),
        )
        if (
            value := problems.check(
                fields.integer, raw.get(key), f"{where}.{key}", minimum=0, maximum=maximum
            )
        )
        is not None
    }
    # 0: no bound for the whole step, said explicitly (unset: its type's default).
    timeout = problems.check(
        fields.integer, raw.get("timeoutSeconds"), f"{where}.timeoutSeconds", minimum=0
    )
    depends_on = problems.check(fields.names, raw.get("dependsOn"), f"{where}.dependsOn")
    # 0: never stalled, said explicitly (unset: its type's normal bound).
    stall = problems.check(
        fields.integer, raw.get("stallSeconds"), f"{where}.stallSeconds", minimum=0
    )
    problems.raise_any()  # so each check above gave its value
    return typed.Step(
        name=cast(str, name),
        type=cast(str, step_type),
        params=cast(dict[str, Any], params),
        timeout_seconds=timeout,
        # Unset fields take the typed template's defaults.
        **budget,
        depends_on=tuple(cast(list[str], depends_on)),
        stall_seconds=stall,
    )


def _params(step_type: str, given: dict[str, Any], where: str, hook: str) -> dict[str, Any]:
    try:
        return registry.validate(step_type, given, hook=hook)
    except registry.ParamError as exc:
        text, prefix = str(exc), f"{exc.field}: "
        message = text[len(prefix) :] if exc.field and text.startswith(prefix) else text
        field = f"{where}.type" if exc.field == "type" else fields.join(f"{where}.with", exc.field)
        raise fields.FieldError(field, message) from None


def _steps(value: Any, hook: str) -> tuple[typed.Step, ...]:
    """Every step; the problems of each step at once, then those between steps."""
    if not isinstance(value, list) or not value or len(value) > MAX_STEPS:
        raise fields.FieldError("spec.steps", f"must be a list of 1 to {MAX_STEPS} steps")
    problems = fields.Problems()
    steps: list[typed.Step] = []
    for i, item in enumerate(value):
        step = problems.check(_step, item, f"spec.steps[{i}]", hook)
        if step is None:
            continue
        if any(s.name == step.name for s in steps):
            problems.add(
                fields.FieldError(f"spec.steps[{i}].name", f"duplicate step name {step.name!r}")
            )
        steps.append(step)
    # Which steps a bad one would have named is unknown: dependencies are judged once all are.
    problems.raise_any()
    graph = {s.name: list(s.depends_on) for s in steps}
    for i, step in enumerate(steps):
        for dep in step.depends_on:
            if dep not in graph:
                problems.add(
                    fields.FieldError(f"spec.steps[{i}].dependsOn", f"unknown step {dep!r}")
                )
    problems.raise_any()
    cycle = graphs.cycle(graph)
    if cycle:
        raise fields.FieldError("spec.steps", f"dependsOn cycle {' -> '.join(cycle)}")
    return tuple(steps)


#: The first cycle of a graph of names (hookpath.runs: templates' waitFor).
cycle = graphs.cycle

TEMPLATE_FIELDS = (
    "hook",
    "clusterSelector",
    "settings",
    "retryAfterSeconds",
    "approvalRetryAfterSeconds",
    "onFailure",
    "deadlineSeconds",
    "onDeadline",
    "concurrency",
    "waitFor",
    "holdsLifecycle",
    "steps",
)


def workflow_template(value: Any, name: str) -> dict[str, Any]:
    """Validate a WorkflowTemplate's `spec` into the shape the engine reads."""
    return typed_template(value, name).as_spec()


def typed_template(value: Any, name: str) -> typed.Template:
    """Validate a WorkflowTemplate's `spec` into its typed form; unset fields take its defaults.
    Every problem at once (FieldErrors): each field is checked whatever the others hold."""
    problems = fields.Problems()
    raw = fields.mapping(
        value, "spec", TEMPLATE_FIELDS, required=("hook", "steps"), problems=problems
    )
    hook = raw.get("hook")
    if hook is not None and hook not in TEMPLATE_HOOKS:
        problems.add(
            fields.FieldError(
                "spec.hook", f"unknown hook {hook!r} (known: {', '.join(TEMPLATE_HOOKS)})"
            )
        )
        hook = None
    wait_for = problems.check(fields.names, raw.get("waitFor"), "spec.waitFor") or []
    if name in wait_for:
        problems.add(
            fields.FieldError("spec.waitFor", f"a template cannot wait for itself ({name!r})")
        )
    holds = hook is not None and problems.check(
        fields.boolean,
        raw.get("holdsLifecycle"),
        "spec.holdsLifecycle",
        typed.holds_by_default(hook),
    )
    if hook == CLUSTER_DELETED:
        # No CAPI call comes with this moment: nothing to hold, no ExtensionConfig settings.
        if holds:
            problems.add(
                fields.FieldError(
                    "spec.holdsLifecycle",
                    "a ClusterDeleted workflow holds nothing: the Cluster is gone",
                )
            )
        if raw.get("settings"):
            problems.add(
                fields.FieldError(
                    "spec.settings",
                    "no ExtensionConfig calls ClusterDeleted, so settings would never match",
                )
            )
    given: dict[str, Any] = {
        "retry_after_seconds": problems.check(
            fields.integer, raw.get("retryAfterSeconds"), "spec.retryAfterSeconds", minimum=1
        ),
        "approval_retry_after_seconds": problems.check(
            fields.integer,
            raw.get("approvalRetryAfterSeconds"),
            "spec.approvalRetryAfterSeconds",
            minimum=1,
        ),
        # A failed UpdateMachine run answers Failure by default: CAPI marks the update failed
        # and requeues (core/reconcilers/machine/machine_controller_inplace_update.go).
        "on_failure": problems.check(
            fields.choice,
            raw.get("onFailure") or ("Fail" if hook == "UpdateMachine" else None),
            "spec.onFailure",
            ON_FAILURE,
        ),
        "deadline_seconds": problems.check(
            fields.integer, raw.get("deadlineSeconds"), "spec.deadlineSeconds", minimum=1
        ),
        "on_deadline": problems.check(
            fields.choice, raw.get("onDeadline"), "spec.onDeadline", ON_DEADLINE
        ),
        "concurrency": problems.check(
            fields.integer, raw.get("concurrency"), "spec.concurrency", minimum=1
        ),
    }
    selector = problems.check(_selector, raw.get("clusterSelector"))
    settings = problems.check(fields.string_map, raw.get("settings"), "spec.settings")
    # A step's parameters are judged against the hook: with none known, they wait for it.
    steps = problems.check(_steps, raw["steps"], hook) if hook and "steps" in raw else None
    problems.raise_any()  # so each check above gave its value
    return typed.Template(
        hook=cast(str, hook),
        cluster_selector=cast(typed.Selector, selector),
        settings=cast(dict[str, str], settings),
        wait_for=tuple(wait_for),
        holds=bool(holds),
        steps=cast(tuple[typed.Step, ...], steps),
        # Unset fields take the typed template's defaults.
        **{k: v for k, v in given.items() if v is not None},
    )


#: Profile names become part of template names (`addon-install-<name>`), which must fit 63.
MAX_PROFILE_NAME = 40
DELETION_BEHAVIOURS = ("RemovePolicies", "LeavePolicies", "EnforceRemovePolicies")
PROFILE_FIELDS = (
    "clusterSelector",
    "dependsOn",
    "clusterDeletionBehavior",
    "addons",
    "retryAfterSeconds",
)


def addon_profile(value: Any, name: str) -> dict[str, Any]:
    """Validate an AddonProfile's `spec`; `addons` is checked as `addon_install` takes `with`."""
    if len(name) > MAX_PROFILE_NAME:
        raise fields.FieldError(
            "metadata.name", f"an AddonProfile name has at most {MAX_PROFILE_NAME} characters"
        )
    raw = fields.mapping(value, "spec", PROFILE_FIELDS, required=("addons",))
    depends_on = fields.names(raw.get("dependsOn"), "spec.dependsOn")
    if name in depends_on:
        raise fields.FieldError("spec.dependsOn", f"a profile cannot depend on itself ({name!r})")
    if not isinstance(raw["addons"], dict):
        raise fields.FieldError("spec.addons", "must be an object")
    try:
        addons = registry.validate(
            "addon_install", raw["addons"], hook="AfterControlPlaneInitialized"
        )
    except registry.ParamError as exc:
        text, prefix = str(exc), f"{exc.field}: "
        message = text[len(prefix) :] if exc.field and text.startswith(prefix) else text
        raise fields.FieldError(fields.join("spec.addons", exc.field), message) from None
    return {
        "clusterSelector": _selector(raw.get("clusterSelector")).as_spec(),
        "dependsOn": depends_on,
        "clusterDeletionBehavior": fields.choice(
            raw.get("clusterDeletionBehavior"), "spec.clusterDeletionBehavior", DELETION_BEHAVIOURS
        ),
        "addons": addons,
        "retryAfterSeconds": fields.integer(
            raw.get("retryAfterSeconds"),
            "spec.retryAfterSeconds",
            minimum=1,
            default=DEFAULT_RETRY_AFTER_SECONDS,
        ),
    }


def profile_problems(depends_on: dict[str, list[str]]) -> list[str]:
    """What is wrong with a whole set of profiles: unknown dependencies, a dependsOn cycle.

    `depends_on` maps every profile that will exist to its dependsOn list, so the caller
    merges the file's profiles with those already stored.
    """
    problems = [
        f"AddonProfile {name!r}: spec.dependsOn: unknown AddonProfile {dep!r}"
        for name, deps in sorted(depends_on.items())
        for dep in deps
        if dep not in depends_on
    ]
    if problems:
        return problems
    cycle = graphs.cycle({name: depends_on[name] for name in sorted(depends_on)})
    if cycle:
        return [f"AddonProfile dependsOn cycle: {' -> '.join(cycle)}"]
    return []


#: Document kinds and the validators of their `spec` (given the document's name).
KINDS: dict[str, Callable[[Any, str], dict[str, Any]]] = {
    "WorkflowTemplate": workflow_template,
    "AddonProfile": addon_profile,
    policies.IN_PLACE: policies.in_place_policy,
    policies.UPGRADE: policies.upgrade_policy,
}


def validate(data: Any, index: int) -> Document:
    """Validate one loaded document; raise SpecError naming it and the field."""
    meta = data.get("metadata") if isinstance(data, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    label = f"document {index}" + (f" ({name})" if isinstance(name, str) and name else "")
    try:
        raw = fields.mapping(data, "", ("apiVersion", "kind", "metadata", "spec"))
        if raw.get("apiVersion") not in API_VERSIONS:
            raise fields.FieldError(
                "apiVersion",
                f"must be {' or '.join(map(repr, API_VERSIONS))}, got {raw.get('apiVersion')!r}",
            )
        kind = raw.get("kind")
        if kind not in KINDS:
            raise fields.FieldError("kind", f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
        # Labels and annotations mean something to kubectl and kustomize, nothing here.
        metadata = fields.mapping(
            raw.get("metadata"), "metadata", ("name", "labels", "annotations"), required=("name",)
        )
        fields.string_map(metadata.get("labels"), "metadata.labels")
        fields.string_map(metadata.get("annotations"), "metadata.annotations")
        name = fields.name(metadata["name"], "metadata.name")
        return Document(index=index, kind=kind, name=name, spec=resource_spec(kind, name, raw))
    except fields.FieldErrors as exc:
        raise SpecError([f"{label}: {m}" for m in exc.messages]) from None
    except fields.FieldError as exc:
        raise SpecError([f"{label}: {exc}"]) from None


def resource_spec(kind: str, name: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The normalized spec of a document or custom resource `obj` of `kind` named `name`.

    What apply_workflows checks of a document's spec, and the resource controller of a
    resource's: raises FieldError naming the field.
    """
    if obj.get("spec") is None:
        raise fields.FieldError("spec", "is required")
    return KINDS[kind](obj["spec"], name)


def parse(text: str) -> list[Document]:
    """Load and validate every document of a file; raise SpecError listing every bad one."""
    loaded: list[tuple[int, Any]] = []
    try:
        for index, data in enumerate(yaml.load_all(text, Loader=_Loader), start=1):
            if data is not None:  # an empty document, e.g. after a trailing `---`
                loaded.append((index, data))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError([f"invalid YAML{where}: {exc.problem or exc.context}"]) from None
    except yaml.YAMLError as exc:
        raise SpecError([f"invalid YAML: {exc}"]) from None
    if not loaded:
        raise SpecError(["no documents"])
    documents: list[Document] = []
    problems: list[str] = []
    for index, data in loaded:
        try:
            documents.append(validate(data, index))
        except SpecError as exc:
            problems += exc.messages
    first: dict[tuple[str, str], int] = {}
    for doc in documents:
        seen = first.setdefault((doc.kind, doc.name), doc.index)
        if seen != doc.index:
            problems.append(
                f"document {doc.index} ({doc.name}): metadata.name: duplicate {doc.kind} "
                f"{doc.name!r} (also document {seen})"
            )
    if problems:
        raise SpecError(problems)
    return documents
