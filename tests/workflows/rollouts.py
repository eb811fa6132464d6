"""A two-wave rollout for tests that run the real servers: canary checks at
AfterClusterUpgrade (a second, failing check for clusters labelled `health: bad`), and the
main wave gated on two canaries at BeforeClusterUpgrade."""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

import redis
from django.conf import settings

from tests.support import workflows as wf


def templates(
    *,
    checks: str = "flaky",
    gate: dict[str, Any] | None = None,
    retry_after: int = 30,
    poll_seconds: float = 5,
) -> None:
    """`checks` is the type of the second canary check (`flaky` fails); `gate` the gate's
    `with`. `poll_seconds` at or above HOOKSVC_POLL_BATCH_MIN_WAIT_SECONDS (5): the gates are
    polled by the batch poller, so no countdown message outlives the test."""
    wf.template(
        "canary-checks",
        hook="AfterClusterUpgrade",
        steps=[{"name": "check", "type": "noop"}],
        clusterSelector={"matchLabels": {"ring": "canary"}},
    )
    wf.template(
        "canary-health",
        hook="AfterClusterUpgrade",
        steps=[{"name": "health", "type": checks, "retries": 0, "retryForSeconds": 0}],
        clusterSelector={"matchLabels": {"health": "bad"}},
    )
    gate = gate or {"matchLabels": {"ring": "canary"}, "count": 2, "pollSeconds": poll_seconds}
    wf.template(
        "wave-main",
        steps=[{"name": "canaries", "type": "gate", "with": gate}],
        clusterSelector={"matchLabels": {"ring": "main"}},
        retryAfterSeconds=retry_after,
    )


def _due_later(message: dict[str, Any]) -> bool:
    eta = message.get("headers", {}).get("eta")
    return bool(eta) and datetime.datetime.fromisoformat(eta) > datetime.datetime.now(datetime.UTC)


def _waiting_tasks(client: redis.Redis) -> list[str]:
    """The task names of the messages in the broker that are due, delivered or not, but
    beat's periodic ones: with a poll batch every second one of those is nearly always there."""
    periodic = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    # Kombu's Redis transport: the queue is a list of messages; delivered ones wait in
    # `unacked`, each as [message, exchange, routing key].
    raw = [json.loads(m) for m in client.lrange("celery", 0, -1)]
    raw += [json.loads(m)[0] for m in client.hvals("unacked")]
    names = [
        str(message.get("headers", {}).get("task")) for message in raw if not _due_later(message)
    ]
    return [name for name in names if name not in periodic]


def drained(timeout: float = 10) -> None:
    """Give the worker `timeout` seconds to take the due messages (beat's periodic ones
    aside), then drop what is left, due or due later (a countdown's wake-up, which a worker
    holds until its time): either would reach the next test's worker, whose log some tests
    read. What a test asserts it checks itself; this only keeps tests apart."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    deadline = time.monotonic() + timeout
    while _waiting_tasks(client) and time.monotonic() < deadline:
        time.sleep(0.1)
    client.delete("celery")
    client.delete("unacked", "unacked_index")
