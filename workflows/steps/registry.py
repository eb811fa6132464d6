"""The step type registry: built-in and custom step types, their parameters, their contract.

A step type is a function registered with `@registry.step_type(...)`. The engine calls it
with a `StepContext` each time the step is due; it returns `Done` or `Poll`, or raises
`errors.TemporaryError` / `errors.PermanentError`. It may be called more than once for the
same work (a worker killed mid-step, a redelivered message), so it must be idempotent:
name what it creates after `ctx.object_name()`, look for it before creating it, and keep
what it needs between polls in `ctx.memo`.

    from workflows.steps import registry

    @registry.step_type("notify", params={"url": registry.Param(str, required=True)})
    def notify(ctx: registry.StepContext) -> registry.Outcome:
        ...
        return registry.Done({"notified": True})
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import re
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from workflows import errors
from workflows.steps import memo

if TYPE_CHECKING:
    from workflows.models import Run, StepRun


@dataclasses.dataclass(frozen=True)
class Done:
    """The step finished successfully; `output` is kept on the step run."""

    output: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Poll:
    """The step started or is still waiting: call it again after `after` seconds.

    `on_time`: the step ends at that moment (a timer), so the call should come then, not up
    to a batch poll's period later (workflows.engine.attempts.needs_countdown).
    """

    after: float
    message: str = ""
    output: Mapping[str, Any] | None = None
    on_time: bool = False


Outcome = Done | Poll


@dataclasses.dataclass
class StepContext:
    """What a step sees: its parameters, its run's context, and its own memory."""

    run_id: int
    step_name: str
    step_type: str
    params: Mapping[str, Any]
    #: The run's context: cluster (name, namespace, uid, labels, ...), hook, versions, settings.
    run_context: Mapping[str, Any]
    #: Persisted between calls of this step; change it in place.
    memo: dict[str, Any]
    #: 1 for the first attempt, 2 after one failure, ...
    attempt: int
    #: When the engine fails the step for its timeoutSeconds (None: no timeout, or not
    #: started yet), so that a step can fail a little before, saying what it waited for.
    deadline: datetime.datetime | None = None
    #: The attempt's time, from the project's clock (workflows.clock), which tests
    #: hold: a step that reads the time reads it here. None: called outside the engine.
    now: datetime.datetime | None = None

    @classmethod
    def of(cls, run: Run, step: StepRun) -> StepContext:
        """The context of `step` of `run`, for its function or its cleanup."""
        deadline = None
        if step.started_at is not None and step.timeout_seconds:
            deadline = step.started_at + datetime.timedelta(seconds=step.timeout_seconds)
        return cls(
            run_id=run.pk,
            step_name=step.name,
            step_type=step.type,
            params=step.params,
            run_context=run.context,
            memo=dict(step.memo),
            attempt=step.failures + 1,
            deadline=deadline,
        )

    def object_name(self, suffix: str = "", max_length: int = 63) -> str:
        """A DNS-1123 name unique to this run and step: what the step creates is found again."""
        # An operator's retry starts a new generation, so its objects get new names.
        generation = int(self.memo.get(memo.GENERATION, 0))
        parts = [f"hooksvc-{self.run_id}-{self.step_name}"]
        parts += [f"r{generation}"] if generation else []
        parts += [suffix] if suffix else []
        base = "-".join(parts).lower()
        base = re.sub(r"[^a-z0-9-]+", "-", base).strip("-")
        if len(base) <= max_length:
            return base
        digest = hashlib.sha256(base.encode()).hexdigest()[:8]
        return f"{base[: max_length - 9].rstrip('-')}-{digest}"

    @property
    def cluster(self) -> Mapping[str, Any]:
        cluster: Mapping[str, Any] = self.run_context.get("cluster", {})
        return cluster


class ParamError(ValueError):
    """A step's `with` parameters are invalid; `field` names the offending one."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter of a step type: its Python type, whether it is required, its default."""

    kind: type | tuple[type, ...]
    required: bool = False
    default: Any = None
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    #: For nested objects and lists of objects: a further check of the value.
    check: Callable[[Any], Any] | None = None
    #: The shape of a nested value, checked after `check` and published in the CRDs'
    #: schemas (workflows.definitions.crds): a list's `items`; an object's known `fields`
    #: (others refused); or a map's `values`, each following one Param. Undeclared, the
    #: CRD accepts any list or object here and `check` alone judges it.
    items: Param | None = None
    fields: Mapping[str, Param] | None = None
    values: Param | None = None


_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    dict: "an object",
    list: "a list",
}


def _type_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # (int, float) reads "a number", not "an integer or a number".
    if float in kinds:
        kinds = tuple(k for k in kinds if k is not int)
    return " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)


def validate_params(schema: Mapping[str, Param], given: Mapping[str, Any]) -> dict[str, Any]:
    """Check `given` against `schema`; return it with defaults filled in."""
    if not isinstance(given, Mapping):
        raise ParamError("", "must be an object")
    unknown = sorted(set(given) - set(schema))
    if unknown:
        raise ParamError(unknown[0], "unknown parameter")
    result: dict[str, Any] = {}
    for name, param in schema.items():
        if name not in given or given[name] is None:
            if param.required:
                raise ParamError(name, "is required")
            if param.default is not None:
                result[name] = param.default
            continue
        result[name] = _value(param, given[name], name)
    return result


def _value(param: Param, value: Any, field: str) -> Any:
    """One given value of `param` at `field`, checked (and normalized by `check`)."""
    kinds = param.kind if isinstance(param.kind, tuple) else (param.kind,)
    # bool is an int in Python but not in YAML's eyes.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ParamError(field, f"must be {_type_name(param.kind)}")
    if param.choices and value not in param.choices:
        raise ParamError(field, f"must be one of {', '.join(map(str, param.choices))}")
    if param.minimum is not None and isinstance(value, int | float) and value < param.minimum:
        raise ParamError(field, f"must be at least {param.minimum:g}")
    if param.check is not None:
        try:
            value = param.check(value)
        except ParamError as exc:
            raise ParamError(
                f"{field}.{exc.field}" if exc.field else field, str(exc).split(": ", 1)[-1]
            ) from None
    _shape(param, value, field)
    return value


def _shape(param: Param, value: Any, field: str) -> None:
    """Check a nested value against the shape `param` declares (items, fields, values)."""
    if param.items is not None and isinstance(value, list):
        for index, item in enumerate(value):
            _item(param.items, item, f"{field}[{index}]")
    if param.fields is not None and isinstance(value, Mapping):
        unknown = sorted(set(value) - set(param.fields))
        if unknown:
            raise ParamError(f"{field}.{unknown[0]}", "unknown field")
        for key, nested in param.fields.items():
            if value.get(key) is None:
                if nested.required:
                    raise ParamError(f"{field}.{key}", "is required")
                continue
            _value(nested, value[key], f"{field}.{key}")
    if param.values is not None and isinstance(value, Mapping):
        for key, item in value.items():
            _item(param.values, item, f"{field}.{key}")


def _item(param: Param, value: Any, field: str) -> None:
    # A list item or a map's value: nulls are not values there.
    if value is None:
        raise ParamError(field, f"must be {_type_name(param.kind)}")
    _value(param, value, field)


StepFunction = Callable[[StepContext], Outcome]

#: A step type's bounds when it declares none (docs/templates.md, "Timeouts and retries"): a
#: whole step of one hour, and a call of its function of five minutes (one call is one look at the
#: world: an API call or a few; what takes longer polls). An inline type has neither: its
#: function returns at once.
DEFAULT_TIMEOUT_SECONDS = 3600
DEFAULT_CALL_TIMEOUT_SECONDS = 300
#: How long a step that only a person ends waits for them when its template says nothing:
#: a week, then it fails, visibly (a run whose approval nobody gave holds no cluster forever).
PERSON_TIMEOUT_SECONDS = 7 * 86400
#: How long a step may go without progress before it shows as stalled, when its type
#: declares no bound of its own (workflows.engine.stalls; docs/stalls.md).
DEFAULT_STALL_SECONDS = 900

#: A type's normal bound: seconds, or a function of the step's parameters (`wait`).
StallBound = int | Callable[[Mapping[str, Any]], int]


@dataclasses.dataclass(frozen=True)
class StepType:
    name: str
    run: StepFunction
    params: Mapping[str, Param]
    #: Further checks across parameters, given the hook (e.g. csi backups before deletion).
    check: Callable[[dict[str, Any], str], None] | None = None
    description: str = ""
    #: Deletes what the step created; the engine calls it when it fails the step itself
    #: (timed out, out of retries), since the step function is then not called again.
    cleanup: Callable[[StepContext], None] | None = None
    #: The whole step's bound (its timeoutSeconds) when the template gives none; 0: none.
    default_timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    #: The bound of one call of `run` (None for an inline type: it returns at once). A call
    #: still running at it is abandoned: a temporary error, or the step's timeout at its
    #: deadline (workflows.engine.attempts).
    call_timeout_seconds: int | None = DEFAULT_CALL_TIMEOUT_SECONDS
    #: The function does no I/O, has no side effects and returns at once (it reads only
    #: its context and memo): the engine may run it under the run's row lock, in the
    #: transaction that schedules it, chained with the next (running it twice is harmless).
    inline: bool = False
    #: What its run's message says while a step of this type waits ("waiting for approval":
    #: "workflow W is waiting for approval at step S"); "": "is running step S".
    waiting_message: str = ""
    #: Only a person ends its waiting (`manage.py workflows approve`, the admin): the run
    #: shows as waiting for approval, the hook answers approvalRetryAfterSeconds, an Event
    #: on the Cluster says how to approve, and the step's `with.message` is what the person
    #: is asked. Its function finds the approval in its memo (workflows.steps.memo).
    waits_for_person: bool = False
    #: How long a step of this type normally goes without progress (workflows.engine.stalls);
    #: 0: never stalled (what a person ends: its run's deadline bounds it).
    stall_seconds: StallBound = DEFAULT_STALL_SECONDS
    #: While it waits, its run says the step's own Poll message ("workflow W waits for the
    #: maintenance window Tue 02:00 Europe/Berlin at step S"), kept current as it changes;
    #: the message must be deterministic (workflows.engine.messages).
    says_own_wait: bool = False

    def normal_seconds(self, params: Mapping[str, Any]) -> int:
        """How long a step of this type with `params` may go without progress."""
        bound = self.stall_seconds
        return max(0, int(bound(params) if callable(bound) else bound))

    #: The least time a step of this type takes from its first run, given its params (a
    #: timer's `seconds`); None: it may end at once. The hook path's answer for a run not
    #: started yet counts it (workflows.hookpath.retry.least_seconds).
    least_seconds: Callable[[Mapping[str, Any]], float] | None = None

    def asks(self, params: Mapping[str, Any]) -> str:
        """What a step of this type asks a person (its `with.message`); "" if it asks nothing."""
        return asks(params, waits_for_person=self.waits_for_person)


_REGISTRY: dict[str, StepType] = {}
#: person_types(), kept until the next registration.
_person_types: frozenset[str] | None = None


def step_type(
    name: str,
    *,
    params: Mapping[str, Param] | None = None,
    check: Callable[[dict[str, Any], str], None] | None = None,
    cleanup: Callable[[StepContext], None] | None = None,
    default_timeout_seconds: int | None = None,
    call_timeout_seconds: int | None = None,
    inline: bool = False,
    waiting_message: str = "",
    waits_for_person: bool = False,
    stall_seconds: StallBound | None = None,
    says_own_wait: bool = False,
    least_seconds: Callable[[Mapping[str, Any]], float] | None = None,
) -> Callable[[StepFunction], StepFunction]:
    """Register a step type under `name`; registering a name twice is an error.

    Its bounds (StepType.default_timeout_seconds, call_timeout_seconds) default to the
    registry's; an inline type has neither, and one that waits for a person no step bound
    and no stall bound (stall_seconds).
    """
    if default_timeout_seconds is None:
        # What a person ends is bounded by its run's deadline (deadlineSeconds), not its own.
        # What a person ends waits for them a week at most, unless the template says
        # otherwise (`timeoutSeconds: 0`: none); an inline type returns at once.
        if waits_for_person:
            default_timeout_seconds = PERSON_TIMEOUT_SECONDS
        else:
            default_timeout_seconds = 0 if inline else DEFAULT_TIMEOUT_SECONDS
    if inline:
        call_timeout_seconds = None
    elif call_timeout_seconds is None:
        call_timeout_seconds = DEFAULT_CALL_TIMEOUT_SECONDS
    elif call_timeout_seconds <= 0:
        # Every call of a type that is not inline is bounded: a bound of 0 would abandon each
        # call at once (workflows.engine.calls), not mean "no bound" as a step's timeout does.
        raise ValueError(
            f"step type {name!r}: call_timeout_seconds must be a positive number of seconds,"
            f" got {call_timeout_seconds}"
        )
    if stall_seconds is None:
        stall_seconds = 0 if waits_for_person else DEFAULT_STALL_SECONDS

    def register(func: StepFunction) -> StepFunction:
        global _person_types
        if name in _REGISTRY and _REGISTRY[name].run is not func:
            raise ValueError(f"step type {name!r} is already registered")
        _person_types = None
        _REGISTRY[name] = StepType(
            name=name,
            run=func,
            params=params or {},
            check=check,
            description=(func.__doc__ or "").strip().splitlines()[0] if func.__doc__ else "",
            cleanup=cleanup,
            default_timeout_seconds=default_timeout_seconds,
            call_timeout_seconds=call_timeout_seconds,
            inline=inline,
            waiting_message=waiting_message,
            waits_for_person=waits_for_person,
            stall_seconds=stall_seconds,
            says_own_wait=says_own_wait,
            least_seconds=least_seconds,
        )
        return func

    return register


def get(name: str) -> StepType:
    load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise errors.PermanentError(f"unknown step type {name!r}") from None


def find(name: str) -> StepType | None:
    """The registered step type `name`, or None."""
    load_builtins()
    return _REGISTRY.get(name)


def names() -> list[str]:
    load_builtins()
    return sorted(_REGISTRY)


def inline_names() -> list[str]:
    """The step types that run inline (StepType.inline)."""
    load_builtins()
    return sorted(name for name, step in _REGISTRY.items() if step.inline)


def person_types() -> frozenset[str]:
    """The step types whose waiting only a person ends (StepType.waits_for_person)."""
    global _person_types
    load_builtins()
    if _person_types is None:
        _person_types = frozenset(n for n, step in _REGISTRY.items() if step.waits_for_person)
    return _person_types


def waits_for_person(name: str) -> bool:
    """Whether steps of type `name` wait for a person (False for an unknown type)."""
    return name in person_types()


def says_own_wait(name: str) -> bool:
    """Whether a waiting step of type `name` gives its run its own message."""
    step = find(name)
    return step is not None and step.says_own_wait


def least_seconds(name: str, params: Mapping[str, Any]) -> float:
    """The least time a step of type `name` with `params` takes (StepType.least_seconds);
    0 for an unknown type, one that declares none, or params that do not say (a row edited
    by hand: only ever less)."""
    step_type = find(name)
    if step_type is None or step_type.least_seconds is None:
        return 0.0
    try:
        return max(0.0, float(step_type.least_seconds(params)))
    except (KeyError, TypeError, ValueError):
        return 0.0


def waiting_message(name: str) -> str:
    """What a run says while a step of type `name` waits ("" for an unknown type)."""
    step = find(name)
    return step.waiting_message if step is not None else ""


#: The parameter of a step that waits for a person that holds what the person is asked.
ASKS_PARAM = "message"


def asks(params: Mapping[str, Any], *, waits_for_person: bool) -> str:
    """What a step with `params` asks a person ("" if it waits for nobody or asks nothing).

    Loads no step type: the admin passes the row's StepRun.waits_for_person.
    """
    return str(params.get(ASKS_PARAM) or "") if waits_for_person else ""


def validate(name: str, given: Mapping[str, Any], *, hook: str) -> dict[str, Any]:
    """Validate a step's `with` for step type `name` at `hook`; raise ParamError."""
    load_builtins()
    if name not in _REGISTRY:
        raise ParamError("type", f"unknown step type {name!r} (known: {', '.join(names())})")
    step = _REGISTRY[name]
    params = validate_params(step.params, given or {})
    if step.check is not None:
        step.check(params, hook)
    return params


_loaded = False
#: Held while the modules are imported: a worker's threads (`make run`'s pool) asking at once
#: wait for the whole registry, where a half-filled one failed runs with "unknown step type".
_load_lock = threading.RLock()
#: Set while the loading thread imports (a module that asks again gets what is there so far).
_loading = False


def load_builtins() -> None:
    """Import the built-in step modules and those named in settings.HOOKSVC_STEP_MODULES."""
    global _loaded, _loading
    if _loaded:
        return
    with _load_lock:
        if _loaded or _loading:
            return
        _loading = True
        try:
            import importlib

            from django.conf import settings

            for module in ("workflows.steps.builtin", *getattr(settings, "STEP_MODULES", ())):
                importlib.import_module(module)
        finally:
            _loading = False
        _loaded = True
