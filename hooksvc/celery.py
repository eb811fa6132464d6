"""The Celery application: the worker, beat and every producer import it from here."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hooksvc.settings")

app = Celery("hooksvc")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
