"""GET /metrics: Prometheus' text format, for every web and worker process at once.

The counters and histograms come from the multiprocess directory (hooksvc/multiproc.py),
so whichever gunicorn worker answers the scrape reports them all. The fleet's gauges are
computed here, at scrape time: runs by template and honest state and the age of the
oldest run holding a lifecycle (one GROUP BY), stalled steps by type, break-glass bypasses
in force by hook, and the depth of the Celery queue in Redis. With HOOKSVC_METRICS_TOKEN
set, the scrape must carry `Authorization: Bearer <token>`. With HOOKSVC_ADMIN_PORT set,
only the admin port serves it (hooksvc/serving/middleware.py).
"""

from __future__ import annotations

import datetime
import hmac
import logging
from collections import Counter
from collections.abc import Iterator

import redis
from django.conf import settings
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from hooksvc import build, multiproc
from hooksvc.contract import catalog

logger = logging.getLogger(__name__)

#: Celery's default queue; kombu's Redis transport keeps it in a list of this name...
CELERY_QUEUE = "celery"
#: ...and messages sent with a priority in lists with these suffixes (its priority steps).
_PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


class RunsCollector(Collector):
    """The fleet as PostgreSQL has it now, in one query per scrape:

    - hooksvc_runs{template,state}: runs by honest state (workflows/operators/states.py:
      awaiting_approval and released included);
    - hooksvc_run_blocked_seconds{hook,template}: the age of the oldest run that holds its
      cluster's lifecycle (workflows/operators/holding.py), 0 when none does;
    - hooksvc_run_awaiting_approval_seconds{template}: how long the longest wait for a
      person has lasted, 0 when nobody is asked.

    Computed per scrape and never written to the multiprocess files, so the gunicorn
    worker that answers reports the fleet once, whatever the number of workers.
    """

    def collect(self) -> Iterator[Metric]:
        from workflows import clock
        from workflows.models import Run
        from workflows.operators import holding, states

        now = clock.now()
        holds = holding.holds(now)
        try:
            rows = list(
                states.annotate(Run.objects.order_by())
                .annotate(asked_at=holding.waiting_since())
                .values_list("template_name", "hook", states.FIELD)
                .annotate(
                    count=Count("id"),
                    oldest=Min("created_at", filter=holds),
                    asked=Min("asked_at", filter=states.where(states.State.AWAITING_APPROVAL)),
                )
            )
        except Exception:
            # The scrape still reports the rest; /readyz and the log say the database is down.
            logger.warning(
                "metrics: runs not counted", extra={"action": "metrics_runs_failed"}, exc_info=True
            )
            return
        counts: dict[tuple[str, str], int] = {}
        oldest: dict[tuple[str, str], datetime.datetime | None] = {}
        asked: dict[str, datetime.datetime] = {}
        blocking = set(holding.blocking_hooks())
        for template, hook, state, count, first, asked_at in rows:
            counts[template, state] = counts.get((template, state), 0) + count
            if asked_at is not None and (template not in asked or asked_at < asked[template]):
                asked[template] = asked_at
            if hook not in blocking:
                continue
            known = oldest.setdefault((hook, template), first)
            if first is not None and (known is None or first < known):
                oldest[hook, template] = first
        runs = GaugeMetricFamily(
            "hooksvc_runs",
            "Workflow runs by template and state (awaiting_approval and released included).",
            labels=["template", "state"],
        )
        # Every state of a template with runs, zeros included, so that a rate or an alert
        # on one state does not see the series vanish.
        for template in sorted({template for template, _ in counts}):
            for state in states.State.values:
                runs.add_metric([template, state], counts.get((template, state), 0))
        yield runs
        blocked = GaugeMetricFamily(
            "hooksvc_run_blocked_seconds",
            "Age of the oldest run holding its cluster's lifecycle, by hook and template"
            " (0: none holds).",
            labels=["hook", "template"],
        )
        for (hook, template), first in sorted(oldest.items(), key=lambda item: item[0]):
            age = max(0.0, (now - first).total_seconds()) if first else 0.0
            blocked.add_metric([hook, template], age)
        yield blocked
        waiting = GaugeMetricFamily(
            "hooksvc_run_awaiting_approval_seconds",
            "How long the longest current wait for a person's approval has lasted, by template"
            " (0: nobody is asked).",
            labels=["template"],
        )
        for template in sorted({template for template, _ in counts}):
            since = asked.get(template)
            waiting.add_metric([template], max(0.0, (now - since).total_seconds()) if since else 0)
        yield waiting


class StallsCollector(Collector):
    """hooksvc_steps_stalled{type}: due steps of running runs that made no progress for
    longer than their type's normal bound (workflows.engine.stalls; docs/stalls.md), by step
    type, zeros for every type with a due step."""

    def collect(self) -> Iterator[Metric]:
        from workflows.engine import stalls

        try:
            # On the database's clock, on which progress is recorded.
            counts = stalls.by_type()
        except Exception:
            logger.warning(
                "metrics: stalls not counted",
                extra={"action": "metrics_stalls_failed"},
                exc_info=True,
            )
            return
        family = GaugeMetricFamily(
            "hooksvc_steps_stalled",
            "Due steps of running runs with no progress for longer than their type's normal"
            " bound, by step type.",
            labels=["type"],
        )
        for step_type in sorted(counts):
            family.add_metric([step_type], counts[step_type])
        yield family


class BypassesCollector(Collector):
    """hooksvc_bypasses_active{hook}: break-glass bypasses in force, every hook (zeros too)."""

    def collect(self) -> Iterator[Metric]:
        from workflows.operators import bypasses

        try:
            counts = Counter(b.hook for b in bypasses.active())
        except Exception:
            logger.warning(
                "metrics: bypasses not counted",
                extra={"action": "metrics_bypasses_failed"},
                exc_info=True,
            )
            return
        family = GaugeMetricFamily(
            "hooksvc_bypasses_active",
            "Break-glass bypasses in force (hook calls answered without runs), by hook.",
            labels=["hook"],
        )
        for hook in catalog.BYPASSABLE:
            family.add_metric([hook], counts.get(hook, 0))
        yield family


class QueueCollector(Collector):
    """hooksvc_celery_queue_depth: wake-ups waiting in Redis for a worker (absent otherwise)."""

    def __init__(self, broker_url: str, queue: str = CELERY_QUEUE) -> None:
        # kombu's Redis on a Unix socket (`make run`'s local broker) is redis-py's unix://.
        if broker_url.startswith("redis+socket://"):
            broker_url = "unix://" + broker_url.removeprefix("redis+socket://")
        self.broker_url = broker_url
        self.queue = queue

    def collect(self) -> Iterator[Metric]:
        if not self.broker_url.startswith(("redis://", "rediss://", "unix://")):
            return
        try:
            client = redis.Redis.from_url(
                self.broker_url, socket_timeout=2, socket_connect_timeout=2
            )
            try:
                with client.pipeline(transaction=False) as pipe:
                    for suffix in _PRIORITY_SUFFIXES:
                        pipe.llen(self.queue + suffix)
                    depth = sum(int(n) for n in pipe.execute())
            finally:
                client.close()
        except redis.RedisError:
            logger.warning(
                "metrics: queue depth unknown",
                extra={"action": "metrics_queue_failed"},
                exc_info=True,
            )
            return
        yield GaugeMetricFamily(
            "hooksvc_celery_queue_depth",
            "Messages waiting in the Celery queue for a worker.",
            value=depth,
        )


def _authorized(request: HttpRequest) -> bool:
    token: str = settings.METRICS_TOKEN
    if not token:
        return True
    given = request.headers.get("Authorization", "")
    # Constant time, so that response times do not reveal how much of a guess was right.
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not _authorized(request):
        response = HttpResponse("unauthorized\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="hooksvc metrics"'
        return response
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(multiproc.directory()))  # type: ignore[no-untyped-call]
    registry.register(build.BuildInfo())
    registry.register(RunsCollector())
    registry.register(BypassesCollector())
    registry.register(StallsCollector())
    registry.register(QueueCollector(settings.CELERY_BROKER_URL))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
