"""The Celery application: the worker, beat and every producer import it from here.

Every hooksvc process imports this module first (it is imported by the `hooksvc`
package), so it is also where the metrics' multiprocess directory is configured, before
anything imports prometheus_client (see hooksvc/multiproc.py), and where a process that is
PID 1 in a container learns to stop on SIGTERM (hooksvc/pid1.py).
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_ready

from hooksvc import build, multiproc, pid1

pid1.install()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hooksvc.settings")
multiproc.configure()

app = Celery("hooksvc")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(sender: Any = None, **kwargs: object) -> None:
    """Drop a connection that is too old or broke (settings.CELERY_DB_REUSE_MAX keeps it).

    Django does this around every request; without it a worker would keep using a
    connection that a PostgreSQL restart broke. A task applied eagerly runs inside its
    caller's transaction, whose connection is not the worker's to close.
    """
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()


@worker_ready.connect
def _serve_worker_metrics(**kwargs: object) -> None:
    """With HOOKSVC_WORKER_METRICS_PORT, the worker serves its own /metrics (plain HTTP).

    In Kubernetes web and worker Pods share no files, so the web's /metrics cannot count
    the worker's step metrics; Prometheus scrapes each worker Pod on this port instead.
    """
    port = os.environ.get("HOOKSVC_WORKER_METRICS_PORT")
    if not port:
        return
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(multiproc.directory()))  # type: ignore[no-untyped-call]
    registry.register(build.BuildInfo())
    start_http_server(int(port), registry=registry)
