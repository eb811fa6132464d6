"""`http`: POSTs the run's context as JSON to a URL; done on 2xx, retried otherwise.

The request carries an `Idempotency-Key` header derived from the run and step, so that
a receiver can recognise a repeat of the same call (the step may run twice after a crash).

Credentials belong in `headersFromEnv` (header name -> environment variable of the worker,
e.g. from a Kubernetes Secret): the value is read when the request is made, so it is in
no template, run snapshot, admin page, log or output. Values given inline in `headers`
are kept in the run's snapshot; the admin shows them redacted.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from django.conf import settings

from workflows import errors
from workflows.steps import registry


def _check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise registry.ParamError("", "must be an http or https URL")
    return url


def _check_headers(headers: dict[str, Any]) -> dict[str, Any]:
    for key, value in headers.items():
        if not isinstance(value, str):
            raise registry.ParamError(key, "must be a string")
    return headers


def _own_configuration(name: str) -> bool:
    """hooksvc's own settings and client credentials: a template must not send them away."""
    return (
        name in settings.ENVIRONMENT
        or name.startswith(("PG", "KUBERNETES_", "CELERY_", "DJANGO_"))
        or name == "KUBECONFIG"
    )


def _check_env_names(names: dict[str, Any]) -> dict[str, Any]:
    for key, value in names.items():
        if not isinstance(value, str) or not value:
            raise registry.ParamError(key, "must be the name of an environment variable")
        if _own_configuration(value):
            raise registry.ParamError(key, f"{value} is hooksvc's own configuration, not a header")
    return names


def _env_headers(names: dict[str, str]) -> dict[str, str]:
    headers = {}
    for header, variable in names.items():
        value = os.environ.get(variable)
        if value is None:
            # Names the variable, never a value: this message is shown and may reach CAPI.
            raise errors.PermanentError(f"environment variable {variable} is not set")
        headers[header] = value
    return headers


@registry.step_type(
    "http",
    params={
        "url": registry.Param(str, required=True, check=_check_url),
        "headers": registry.Param(
            dict, default={}, check=_check_headers, values=registry.Param(str)
        ),
        "headersFromEnv": registry.Param(
            dict, default={}, check=_check_env_names, values=registry.Param(str)
        ),
        "timeoutSeconds": registry.Param((int, float), default=10, minimum=1),
    },
)
def http(ctx: registry.StepContext) -> registry.Outcome:
    """POSTs the run's context to a URL."""
    url = ctx.params["url"]
    body = json.dumps(
        {"run": ctx.run_id, "step": ctx.step_name, **ctx.run_context}, sort_keys=True
    ).encode()
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked when validated
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": ctx.object_name(),
            **ctx.params.get("headers", {}),
            **_env_headers(ctx.params.get("headersFromEnv", {})),
        },
    )
    # hostname[:port], not netloc: a URL's user:password@ must not reach a message.
    parts = urllib.parse.urlsplit(url)
    host = f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
    try:
        # bandit B310: _check_url allows only http and https when the template is validated.
        with urllib.request.urlopen(request, timeout=ctx.params["timeoutSeconds"]) as response:  # noqa: S310  # nosec B310
            status = response.status
    except urllib.error.HTTPError as exc:
        raise errors.TemporaryError(f"{host} answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise errors.TemporaryError(f"{host} did not answer") from exc
    return registry.Done({"status": status})
