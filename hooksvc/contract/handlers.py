"""The extension handlers this server registers: one per hook, named and tuned by settings.

HOOKSVC_HANDLERS holds JSON overrides keyed by hook name, for example
`{"BeforeClusterUpgrade": {"name": "backup", "timeoutSeconds": 5, "failurePolicy": "Fail"}}`.
The rules are those Cluster API applies to a DiscoveryResponse, checked at startup.
HOOKSVC_OPTIONAL_HOOKS names the optional families served beside the lifecycle hooks
(`InPlaceUpdates`, `UpgradePlan`: catalog.OPTIONAL_FAMILIES), comma-separated.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re

from django.conf import settings

from hooksvc.contract import catalog

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
FAILURE_POLICIES = ("Fail", "Ignore")
#: Cluster API's default when an extension leaves timeoutSeconds unset.
DEFAULT_TIMEOUT_SECONDS = 10
#: The range a handler's timeoutSeconds may take. CAPI's discovery check
#: (internal/runtime/client/client.go) allows 0 to 30, but ExtensionConfig v1beta2 declares
#: `minimum: 1` for status.handlers[].timeoutSeconds (api/runtime/v1beta2/
#: extensionconfig_types.go), and a 0 there is dropped as unset (`omitempty`), so the call
#: would silently use the 10 s default: 0 is refused rather than mean something else.
TIMEOUT_SECONDS_RANGE = (1, 30)


class ConfigurationError(Exception):
    """HOOKSVC_HANDLERS is invalid."""


@dataclasses.dataclass(frozen=True)
class Handler:
    hook: catalog.Hook
    name: str
    timeout_seconds: int
    #: Fail by default: with Ignore, CAPI would treat an unreachable hooksvc as a success.
    failure_policy: str

    def discovery_entry(self) -> dict[str, object]:
        return {
            "name": self.name,
            "requestHook": {"apiVersion": catalog.API_VERSION, "hook": self.hook.name},
            "timeoutSeconds": self.timeout_seconds,
            "failurePolicy": self.failure_policy,
        }


def families(optional: str) -> tuple[str, ...]:
    """The optional families HOOKSVC_OPTIONAL_HOOKS turns on, checked."""
    names = tuple(dict.fromkeys(n.strip() for n in optional.split(",") if n.strip()))
    for name in names:
        if name not in catalog.OPTIONAL_FAMILIES:
            raise ConfigurationError(
                f"HOOKSVC_OPTIONAL_HOOKS: unknown family {name!r};"
                f" one of: {', '.join(catalog.OPTIONAL_FAMILIES)}"
            )
    return names


def build(overrides_json: str, optional: str = "") -> tuple[Handler, ...]:
    """Return the handlers for the nine lifecycle hooks and the optional families turned
    on, with `overrides_json` applied."""
    served = families(optional)
    try:
        overrides = json.loads(overrides_json) if overrides_json.strip() else {}
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"HOOKSVC_HANDLERS is not valid JSON: {exc}") from exc
    if not isinstance(overrides, dict):
        raise ConfigurationError("HOOKSVC_HANDLERS must be a JSON object keyed by hook name")
    unknown = sorted(set(overrides) - set(catalog.ALL_HOOKS))
    if unknown:
        raise ConfigurationError(f"HOOKSVC_HANDLERS: unknown hook {unknown[0]!r}")
    hooks = [h for h in catalog.ALL_HOOKS.values() if not h.optional or h.family in served]
    unserved = sorted(set(overrides) - {h.name for h in hooks})
    if unserved:
        family = catalog.ALL_HOOKS[unserved[0]].family
        raise ConfigurationError(
            f"HOOKSVC_HANDLERS: hook {unserved[0]!r} is not served;"
            f" add {family} to HOOKSVC_OPTIONAL_HOOKS"
        )
    handlers = []
    for hook in hooks:
        handlers.append(_handler(hook, overrides.get(hook.name, {})))
    names = [h.name for h in handlers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigurationError(f"HOOKSVC_HANDLERS: handler name {dupes[0]!r} is used twice")
    return tuple(handlers)


def _handler(hook: catalog.Hook, override: object) -> Handler:
    where = f"HOOKSVC_HANDLERS.{hook.name}"
    if not isinstance(override, dict):
        raise ConfigurationError(f"{where} must be an object")
    unknown = sorted(set(override) - {"name", "timeoutSeconds", "failurePolicy"})
    if unknown:
        raise ConfigurationError(f"{where}: unknown field {unknown[0]!r}")
    name = override.get("name", hook.default_handler_name)
    if not isinstance(name, str) or len(name) > 63 or not _DNS1123_LABEL.match(name):
        raise ConfigurationError(f"{where}.name must be a DNS-1123 label, got {name!r}")
    timeout = override.get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS)
    low, high = TIMEOUT_SECONDS_RANGE
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not low <= timeout <= high:
        raise ConfigurationError(
            f"{where}.timeoutSeconds must be an integer from {low} to {high}"
            " (ExtensionConfig v1beta2 requires at least 1), got"
            f" {json.dumps(timeout)}"
        )
    policy = override.get("failurePolicy", "Fail")
    if policy not in FAILURE_POLICIES:
        raise ConfigurationError(f"{where}.failurePolicy must be Fail or Ignore, got {policy!r}")
    return Handler(hook=hook, name=name, timeout_seconds=timeout, failure_policy=policy)


@functools.cache
def _configured(overrides_json: str, optional: str) -> tuple[Handler, ...]:
    return build(overrides_json, optional)


def configured() -> tuple[Handler, ...]:
    """The handlers of this process, from settings.HOOKS_HANDLERS and OPTIONAL_HOOKS."""
    return _configured(settings.HOOKS_HANDLERS, settings.OPTIONAL_HOOKS)


def lookup(path_segment: str, name: str) -> Handler | None:
    """The handler served at `<hook segment>/<name>`, or None."""
    for handler in configured():
        if handler.hook.path_segment == path_segment and handler.name == name:
            return handler
    return None
