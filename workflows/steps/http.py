"""`http`: POSTs the run's context as JSON to a URL; done on 2xx, retried otherwise.

The request carries an `Idempotency-Key` header derived from the run and step, so that
a receiver can recognise a repeat of the same call (the step may run twice after a crash).

A redirect is not followed: it fails the step, naming where it points. urllib would follow
a 301, 302 or 303 of a POST as a GET without the body, and would send every header,
credentials included, to whatever host the redirect names (CPython Lib/urllib/request.py
HTTPRedirectHandler.redirect_request). When the receiver does not answer, the step's
message (shown on run pages, copied by CAPI into conditions) says only that: whether the
port was closed, the name unknown or TLS failed would make the step a port scanner for
anyone who may edit templates. The operator's log says why (the name did not resolve, the
connection was refused, TLS failed and on what, or no answer came in time), in words that
depend only on the cause's kind.

Credentials belong in `headersFromEnv` (header name -> environment variable of the worker,
e.g. from a Kubernetes Secret): the value is read when the request is made, so it is in
no template, run snapshot, admin page, log or output. Only the variables the setting
HOOKSVC_HTTP_ENV_ALLOWLIST names may be sent (checked when a template is validated and
again when the step runs: the worker's environment holds whatever its shell had). Values
given inline in `headers` are kept in the run's snapshot; every page and the API show them
redacted.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from http import client as http_client
from typing import Any

from django.conf import settings

from workflows import errors
from workflows.steps import registry

logger = logging.getLogger(__name__)


def _check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise registry.ParamError("", "must be an http or https URL")
    if _credentials_in(url):
        raise registry.ParamError("", _CREDENTIALS)
    return url


#: urllib never sends a URL's user:password@ (it takes them for part of the host name), and
#: a template is no place for a secret.
_CREDENTIALS = "must not carry credentials (user:password@); put them in headersFromEnv"


def _credentials_in(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    return parts.username is not None or parts.password is not None


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


def _refused(variable: str) -> str | None:
    """Why `variable` may not be sent as a header, or None."""
    if _own_configuration(variable):
        return f"{variable} is hooksvc's own configuration, not a header"
    if variable not in settings.HTTP_ENV_ALLOWLIST:
        return f"{variable} is not in HOOKSVC_HTTP_ENV_ALLOWLIST (the variables steps may send)"
    return None


def _check_env_names(names: dict[str, Any]) -> dict[str, Any]:
    for key, value in names.items():
        if not isinstance(value, str) or not value:
            raise registry.ParamError(key, "must be the name of an environment variable")
        why = _refused(value)
        if why:
            raise registry.ParamError(key, why)
    return names


def _env_headers(names: dict[str, str]) -> dict[str, str]:
    headers = {}
    for header, variable in names.items():
        # Again here: the snapshot may predate the setting, or a worker may have another one.
        why = _refused(variable)
        if why:
            raise errors.PermanentError(f"headersFromEnv.{header}: {why}")
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
    # One POST per attempt: ten minutes without success is a streak of failed attempts.
    stall_seconds=600,
)
def http(ctx: registry.StepContext) -> registry.Outcome:
    """POSTs the run's context to a URL."""
    url = ctx.params["url"]
    if _credentials_in(url):  # a run that started before templates were checked for them
        raise errors.PermanentError(f"url of {_where(url)} {_CREDENTIALS}")
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
    host = _where(url)
    timeout = ctx.params["timeoutSeconds"]
    opener = urllib.request.build_opener(_NoRedirects)
    try:
        # bandit B310: _check_url allows only http and https when the template is validated.
        with opener.open(request, timeout=timeout) as response:  # nosec B310
            status = response.status
    except urllib.error.HTTPError as exc:
        exc.close()
        if 300 <= exc.code < 400:
            target = _redirect_target(url, exc.headers.get("Location"))
            raise errors.PermanentError(
                f"{host} answered HTTP {exc.code}, a redirect to {target}: redirects are not"
                " followed (they would send the request elsewhere); set url to where it points"
            ) from exc
        raise errors.TemporaryError(f"{host} answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError, http_client.HTTPException) as exc:
        cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        # The cause for the operator only: the message is shown to whoever may read runs.
        logger.warning(
            "http step %s of run %s: %s",
            ctx.step_name,
            ctx.run_id,
            _no_answer(host, url, timeout, cause),
            extra={"run": ctx.run_id, "step": ctx.step_name},
        )
        raise errors.TemporaryError(f"{host} did not answer (the worker's log says why)") from exc
    return registry.Done({"status": status})


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is an answer, not an instruction: urllib raises it as an HTTPError."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _where(url: str) -> str:
    """hostname[:port] of `url`: no credentials, path or query."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


def _redirect_target(url: str, location: str | None) -> str:
    """Where a redirect points, without credentials or query (they may carry secrets)."""
    if not location:
        return "nowhere (no Location header)"
    parts = urllib.parse.urlsplit(urllib.parse.urljoin(url, location))
    return f"{parts.scheme}://{_where(parts.geturl())}{parts.path}"


#: OpenSSL's verify codes (X509_V_ERR_*) for what people get wrong with certificates.
_UNTRUSTED = {
    9: "its certificate is not valid yet",
    10: "its certificate has expired",
    18: "its certificate is self-signed",
    19: "its certificate chain is not signed by a trusted CA",
    20: "its certificate is not signed by a trusted CA",
    21: "its certificate is not signed by a trusted CA",
}


def _no_answer(host: str, url: str, timeout: float, cause: object) -> str:
    """Why `host` gave no HTTP answer, in words that depend only on the cause's kind."""
    if isinstance(cause, socket.gaierror):
        return f"the name {urllib.parse.urlsplit(url).hostname} did not resolve (DNS)"
    if isinstance(cause, ConnectionRefusedError):
        return f"{host} refused the connection"
    if isinstance(cause, ssl.SSLCertVerificationError):
        code = cause.verify_code
        if code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
            why = f"its certificate is not for {urllib.parse.urlsplit(url).hostname}"
        else:
            why = _UNTRUSTED.get(code, "its certificate could not be verified")
        return f"TLS with {host} failed: {why}"
    if isinstance(cause, ssl.SSLError):
        return f"TLS with {host} failed (does it serve HTTPS on that port?)"
    if isinstance(cause, TimeoutError):
        return f"{host} did not answer within {timeout:g} s"
    if isinstance(cause, ConnectionResetError | http_client.RemoteDisconnected):
        return f"{host} closed the connection without answering"
    return f"{host} did not answer"
