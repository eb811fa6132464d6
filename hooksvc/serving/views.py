"""The Runtime SDK endpoints: Discovery, the nine lifecycle hooks and the optional hooks
(in-place updates, upgrade plans) an operator turned on, as plain Django views.

CAPI's rules shape this module: every answer to a well-formed path is HTTP 200 with the
outcome in the body, because a non-200 falls under the handler's failurePolicy and
`Ignore` would turn it into a success. So bad input becomes `status: Failure`, and a
state store that cannot be reached keeps blocking hooks waiting instead of a 5xx.

These were DRF views; DRF's request, negotiation and renderer machinery was a tenth of a
hook call's CPU and none of it was used (no parser, no authentication, one renderer). The
responses are the bytes DRF's JSONRenderer wrote, headers included (see `_json`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import DatabaseError, DataError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from hooksvc import metrics
from hooksvc.contract import catalog, handlers, machines, wire
from workflows import clock
from workflows.hookpath import answers, hookcalls, optional

logger = logging.getLogger(__name__)

#: Re-reads of one lingering call, at most: the first just after the change's moment, then
#: every LINGER_GAP_SECONDS (a batch poll comes at a beat, up to a second after it).
LINGER_REREADS = 10
LINGER_GAP_SECONDS = 0.1
#: The calls one process holds at once: a lingering call keeps one of its threads, so the
#: rest stay free for other calls; when all are taken, a call is answered at once.
_lingering = threading.BoundedSemaphore(max(1, settings.HOOK_LINGER_CALLS))


def _json(
    body: Mapping[str, Any], *, status: int = 200, headers: Mapping[str, str] | None = None
) -> HttpResponse:
    """`body` as DRF's JSONRenderer wrote it: compact UTF-8, no NaN, U+2028/U+2029 escaped
    (so the text is also a JavaScript literal), and the Allow header of a POST-only view."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    response = HttpResponse(
        text.encode(), status=status, content_type="application/json", headers=headers
    )
    response["Allow"] = "POST"
    return response


def _method_not_allowed(request: HttpRequest) -> HttpResponse | None:
    # CAPI only POSTs: anything else is answered as DRF answered it.
    if request.method == "POST":
        return None
    return _json({"detail": f'Method "{request.method}" not allowed.'}, status=405)


def _read_body(request: HttpRequest) -> bytes:
    """Read at most MAX_BODY_BYTES; a larger body is refused before it is buffered."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    try:
        length = int(declared)
    except ValueError:
        raise wire.BadRequest("Content-Length is not a number") from None
    if length > wire.MAX_BODY_BYTES:
        raise wire.BadRequest("request body is larger than 20 MiB")
    return request.read(length) if length else b""


# CAPI authenticates with mutual TLS (when configured), not with Django sessions or CSRF
# tokens.
@csrf_exempt
def discovery(request: HttpRequest) -> HttpResponse:
    refused = _method_not_allowed(request)
    if refused is not None:
        return refused
    body: dict[str, Any] = {
        "apiVersion": catalog.API_VERSION,
        "kind": "DiscoveryResponse",
        "status": catalog.Status.SUCCESS,
    }
    try:
        wire.check_type_meta(wire.decode(_read_body(request)), "DiscoveryRequest")
    except wire.BadRequest as exc:
        failed = answers.refused(str(exc))
        body.update(status=failed.status, message=failed.message)
        return _json(body, headers={"Connection": "close"} if _oversized(request) else None)
    body["handlers"] = [h.discovery_entry() for h in handlers.configured()]
    return _json(body)


def _oversized(request: HttpRequest) -> bool:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0) > wire.MAX_BODY_BYTES
    except ValueError:
        return True


@csrf_exempt
def lifecycle_hook(request: HttpRequest, hook_segment: str, handler_name: str) -> HttpResponse:
    refused = _method_not_allowed(request)
    if refused is not None:
        return refused
    handler = handlers.lookup(hook_segment, handler_name)
    if handler is None:
        return _json({"detail": "no such hook handler"}, status=404)
    started = time.perf_counter()
    if handler.hook.optional:
        body, headers = _answer_optional(request, handler, started)
    else:
        body, headers = _answer(request, handler, started)
    # Every answer is counted, rejected requests and outages too: a counter update only.
    metrics.hook_answered(
        hook=handler.hook.name,
        handler=handler.name,
        answer=metrics.hook_answer(body["status"], body.get("retryAfterSeconds", 0)),
        seconds=time.perf_counter() - started,
    )
    return _json(body, headers=headers)


def _answer(
    request: HttpRequest, handler: handlers.Handler, started: float
) -> tuple[catalog.HookResponse, dict[str, str] | None]:
    hook = handler.hook
    try:
        call = wire.parse_hook_call(hook, _read_body(request))
    except wire.BadRequest as exc:
        return _refused(request, hook, exc)
    try:
        answer, held_ms, rereads = _answer_lingering(call, handler.name)
    except DataError:
        # The values, not the store, are at fault (wire.py should have refused them):
        # holding with "store unavailable" would wait forever for an outage that is not.
        logger.warning(
            "hook request has values the state store refused",
            extra={"action": "hook_unstorable", **_cluster_fields(call)},
            exc_info=True,
        )
        return _response(hook, answers.UNSTORABLE), None
    except DatabaseError:
        logger.exception(
            "state store unavailable during hook call",
            extra={"action": "hook_store_down", **_cluster_fields(call)},
        )
        return _response(hook, answers.store_down(hook)), None
    except Exception:
        logger.exception(
            "hook call failed", extra={"action": "hook_error", **_cluster_fields(call)}
        )
        return _response(hook, answers.INTERNAL), None
    latency_ms = round((time.perf_counter() - started) * 1000, 2)
    try:
        hookcalls.record(
            call=call,
            handler=handler.name,
            status=answer.status,
            message=answer.message,
            retry_after=answer.retry_after if hook.blocking else None,
            latency_ms=latency_ms,
        )
    except DatabaseError:
        # The answer stands; only its record in the admin is missing.
        logger.warning(
            "hook call not recorded",
            extra={"action": "hook_record_failed", **_cluster_fields(call)},
        )
    logger.info(
        "hook answered",
        extra={
            "action": "hook_answered",
            **_cluster_fields(call),
            "status": answer.status,
            "retry_after": answer.retry_after,
            "runs": list(answer.runs),
            "duration_ms": latency_ms,
            "held_ms": held_ms,
            "rereads": rereads,
        },
    )
    # Server-Timing (W3C): how long a lingering call was held, so that a client can tell
    # it from a slow answer; CAPI ignores it.
    headers = {"Server-Timing": f"linger;dur={held_ms}"} if rereads else None
    return _response(hook, answer), headers


def _refused(
    request: HttpRequest, hook: catalog.Hook, exc: wire.BadRequest
) -> tuple[catalog.HookResponse, dict[str, str] | None]:
    """A request hooksvc cannot take: a Failure in wire's fixed words, and the reason logged."""
    logger.info(
        "hook request rejected",
        extra={"action": "hook_rejected", "hook": hook.name, "reason": str(exc)},
    )
    # An oversized body is left unread: close the connection rather than drain it.
    headers = {"Connection": "close"} if _oversized(request) else None
    return _response(hook, answers.refused(str(exc))), headers


def _response(hook: catalog.Hook, answer: answers.Answer) -> catalog.HookResponse:
    return catalog.response(hook, answer.status, answer.message, answer.retry_after)


def _answer_optional(
    request: HttpRequest, handler: handlers.Handler, started: float
) -> tuple[catalog.HookResponse, dict[str, str] | None]:
    """An optional hook's answer (workflows.hookpath.optional), with the same rules as a
    lifecycle hook's: HTTP 200, fixed messages, a blocking hook holds through an outage."""
    hook = handler.hook
    try:
        call = machines.parse(hook, _read_body(request))
    except wire.BadRequest as exc:
        return _refused(request, hook, exc)
    key, namespace, cluster, moment = machines.record_fields(call)
    where = {"hook": hook.name, "cluster": f"{namespace}/{cluster}", "moment": moment}
    fields: dict[str, object] = {}
    try:
        answer, fields = optional.answer(call, handler_name=handler.name)
    except DataError:
        logger.warning(
            "hook request has values the state store refused",
            extra={"action": "hook_unstorable", **where},
            exc_info=True,
        )
        answer = answers.UNSTORABLE
    except DatabaseError:
        logger.exception(
            "state store unavailable during hook call", extra={"action": "hook_store_down", **where}
        )
        answer = answers.store_down(hook)
    except Exception:
        logger.exception("hook call failed", extra={"action": "hook_error", **where})
        answer = answers.INTERNAL
    latency_ms = round((time.perf_counter() - started) * 1000, 2)
    try:
        hookcalls.record_row(
            hook=hook.name,
            handler=handler.name,
            cluster_key=key,
            cluster_namespace=namespace,
            cluster_name=cluster,
            moment=moment,
            status=answer.status,
            message=answer.message,
            retry_after=answer.retry_after if hook.blocking else None,
            latency_ms=latency_ms,
        )
    except DatabaseError:
        logger.warning("hook call not recorded", extra={"action": "hook_record_failed", **where})
    logger.info(
        "hook answered",
        extra={
            "action": "hook_answered",
            **where,
            "status": answer.status,
            "retry_after": answer.retry_after,
            "runs": list(answer.runs),
            "duration_ms": latency_ms,
        },
    )
    body = catalog.response(hook, answer.status, answer.message, answer.retry_after, fields)
    return body, None


def _answer_lingering(call: wire.HookCall, handler_name: str) -> tuple[answers.Answer, float, int]:
    """The answer, after holding the call until its runs change if they are about to
    (workflows.hookpath.retry.linger_until): each re-read is the poll's one query. Returns
    the answer, how long the call was held (ms) and how many re-reads it took.

    retryAfterSeconds is whole seconds, so without this CAPI sees a run's end up to a second
    late. The hold stays at most HOOKSVC_HOOK_LINGER_SECONDS (far below CAPI's call timeout,
    10 s by default: cluster-api api/runtime/hooks/v1alpha1/discovery_types.go
    DefaultHandlersTimeoutSeconds, used by internal/runtime/client/client.go), and at most
    HOOKSVC_HOOK_LINGER_CALLS calls of a process hold at once (the others are answered now).
    """
    answer = answers.answer(call, handler_name=handler_name)
    if answer.linger_until is None or not _lingering.acquire(blocking=False):
        return answer, 0.0, 0
    began = time.monotonic()
    deadline = began + settings.HOOK_LINGER_SECONDS
    rereads = 0
    try:
        while answer.linger_until is not None and rereads < LINGER_REREADS:
            pause = (answer.linger_until - clock.now()).total_seconds()
            if pause <= 0 or rereads:
                # Due already (a batch poll comes up to a beat period after it): spaced out.
                pause = max(pause, LINGER_GAP_SECONDS)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(pause, left))
            answer = answers.answer(call, handler_name=handler_name)
            rereads += 1
    finally:
        _lingering.release()
    return answer, round((time.monotonic() - began) * 1000, 2), rereads


def _cluster_fields(call: wire.HookCall) -> dict[str, str]:
    return {
        "hook": call.hook.name,
        "cluster": f"{call.cluster.namespace}/{call.cluster.name}",
    }
