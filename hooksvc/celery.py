"""The Celery application: the worker, beat and every producer import it from here.

Every hooksvc process imports this module first (it is imported by the `hooksvc`
package), so it is also where the metrics' multiprocess directory is configured, before
anything imports prometheus_client (see hooksvc/multiproc.py).
"""

from __future__ import annotations

import os

from celery import Celery

from hooksvc import multiproc

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hooksvc.settings")
multiproc.configure()

app = Celery("hooksvc")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
